// StreamingProvider: bit-identity with the resident provider (three architectures,
// dense and MoE), bytes read per pass, the memory budget, slot safety under slow reads,
// and failed reads ending the request with a clear error. Uses the small golden models.
#include "tiers/streaming_provider.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "compute/compute.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "io/testing/fault_queue.h"
#include "model/cpu_blocks.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/testing/golden.h"
#include "tiers/testing/resident_provider.h"

namespace hypura::tiers {
namespace {

namespace golden = model::golden;
constexpr int64_t kNCtx = 128;
using golden::Model;
using golden::open_model;
using golden::sequence;

// golden::forward_logits, expecting every pass to succeed.
std::vector<float> run(const Model& m, model::WeightProvider& provider,
                       const std::vector<int32_t>& tokens, int64_t n_batch, uint64_t* n_passes) {
  std::vector<float> logits;
  Status st = golden::forward_logits(m.model, provider, tokens, n_batch, &logits, n_passes);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return logits;
}

// The FFN tensors (dense or expert) of every `stride`-th layer, as a per-tensor mask.
std::vector<bool> ffn_mask(const Model& m, int stride) {
  std::vector<bool> streamed(m.file.tensors().size(), false);
  const auto& layers = m.model->weights().layers;
  for (size_t il = 0; il < layers.size(); il += stride) {
    const auto& lw = layers[il];
    for (model::TensorId id : {lw.ffn_gate, lw.ffn_up, lw.ffn_down, lw.ffn_gate_exps,
                               lw.ffn_up_exps, lw.ffn_down_exps}) {
      if (id != model::kNone) streamed[id] = true;
    }
  }
  return streamed;
}

uint64_t masked_bytes(const Model& m, const std::vector<bool>& mask) {
  uint64_t n = 0;
  for (size_t i = 0; i < mask.size(); ++i) n += mask[i] ? m.file.tensors()[i].n_bytes : 0;
  return n;
}

struct StreamCase {
  const char* model;
  int stride;  // stream the FFN of every stride-th layer (the rest stays resident)
  int n_slots;
};

class StreamedLogits : public testing::TestWithParam<StreamCase> {};

// A streamed run gives bit-identical logits, reads exactly the streamed bytes once per
// forward pass (the prompt batch is one pass) and stays inside its memory budget.
TEST_P(StreamedLogits, BitIdenticalAndReadsPlannedBytes) {
  const StreamCase c = GetParam();
  Model m = open_model(c.model);
  const std::vector<int32_t> tokens = sequence("B");
  ASSERT_GE(tokens.size(), 8u);

  auto resident = tiers::ResidentProvider::load(m.file, nullptr);
  ASSERT_TRUE(resident.is_ok()) << resident.status().message();
  uint64_t resident_passes = 0;
  const std::vector<float> want = run(m, *resident.value(), tokens, 5, &resident_passes);

  tiers::StreamingConfig config;
  config.streamed = ffn_mask(m, c.stride);
  config.n_slots = c.n_slots;
  config.prefetch_depth = c.n_slots - 1;
  // The budget: the whole file minus what streams, plus the pool and some alignment slack.
  const uint64_t streamed_bytes = masked_bytes(m, config.streamed);
  ASSERT_GT(streamed_bytes, 0u);
  tiers::MemoryLedger unlimited(0);
  uint64_t needed = 0;
  {
    auto probe = tiers::StreamingProvider::create(m.file, config, unlimited, nullptr);
    ASSERT_TRUE(probe.is_ok()) << probe.status().message();
    needed = unlimited.used();
  }
  tiers::MemoryLedger too_small(needed - 1);
  EXPECT_EQ(tiers::StreamingProvider::create(m.file, config, too_small, nullptr).status().code(),
            StatusCode::kResourceExhausted);

  tiers::MemoryLedger ledger(needed);
  auto streaming = tiers::StreamingProvider::create(m.file, config, ledger, nullptr);
  ASSERT_TRUE(streaming.is_ok()) << streaming.status().message();
  tiers::StreamingProvider& sp = *streaming.value();
  EXPECT_EQ(sp.bytes_per_pass(), streamed_bytes);
  uint64_t passes = 0;
  const std::vector<float> got = run(m, sp, tokens, 5, &passes);

  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << "streamed logits differ from resident ones";
  const tiers::StreamingStats s = sp.stats();
  EXPECT_EQ(passes, tokens.size() - 4);
  EXPECT_EQ(s.passes, passes);
  // Reads ahead into the next pass are not yet consumed; everything else was used once.
  EXPECT_EQ(s.bytes_read - s.unconsumed_bytes, streamed_bytes * passes);
  EXPECT_LE(s.unconsumed_bytes, streamed_bytes);
  EXPECT_EQ(s.demand_reads, 0u) << "every layer should have been read ahead";
  EXPECT_LE(ledger.snapshot().peak, ledger.budget());
}

INSTANTIATE_TEST_SUITE_P(Archs, StreamedLogits,
                         testing::Values(StreamCase{"llama-q4_k_m", 1, 3},
                                         StreamCase{"qwen2-q4_k_m", 2, 2},
                                         StreamCase{"gemma3-q4_k_m", 1, 4},
                                         StreamCase{"mixtral-q4_k_m", 1, 3}),
                         [](const auto& info) {
                           std::string n = info.param.model;
                           for (char& ch : n)
                             ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

// Bench's same-run references run the provider's own reads with no compute: I/O-only
// passes read whole passes (counted like any pass) and re-reading the resident tensors
// into their memory leaves them as they were, so the next run's logits are unchanged.
TEST(StreamingReferences, IoOnlyPassesAndReloadKeepTheWeights) {
  Model m = open_model("llama-q4_k_m");
  const std::vector<int32_t> tokens = sequence("B");
  tiers::StreamingConfig config;
  config.streamed = ffn_mask(m, 2);
  tiers::MemoryLedger ledger(0);
  auto created = tiers::StreamingProvider::create(m.file, config, ledger, nullptr);
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  tiers::StreamingProvider& sp = *created.value();
  uint64_t passes = 0;
  const std::vector<float> want = run(m, sp, tokens, 5, &passes);
  const std::vector<uint8_t> resident_before(sp.resident().buffer.data(),
                                             sp.resident().buffer.data() + sp.resident().bytes);

  const tiers::StreamingStats before = sp.stats();
  auto bps = sp.measure_io_only_bps(0);  // at least one whole pass
  ASSERT_TRUE(bps.is_ok()) << bps.status().message();
  EXPECT_GT(bps.value(), 0);
  const tiers::StreamingStats after = sp.stats();
  EXPECT_GE(after.passes, before.passes + 1);
  EXPECT_EQ(
      (after.bytes_read - after.unconsumed_bytes) - (before.bytes_read - before.unconsumed_bytes),
      sp.bytes_per_pass() * (after.passes - before.passes));

  auto reload = sp.reload_resident_bps();
  ASSERT_TRUE(reload.is_ok()) << reload.status().message();
  EXPECT_GT(reload.value(), 0);
  EXPECT_EQ(
      std::memcmp(resident_before.data(), sp.resident().buffer.data(), resident_before.size()), 0);
  EXPECT_EQ(
      std::memcmp(run(m, sp, tokens, 5, &passes).data(), want.data(), want.size() * sizeof(float)),
      0)
      << "logits changed after the reference reads";
}

// Builds a provider whose reads go through a fault-injecting engine.
Result<std::unique_ptr<tiers::StreamingProvider>> faulty(const Model& m, io::FaultPlan plan,
                                                         int n_slots, tiers::MemoryLedger& ledger) {
  tiers::StreamingConfig config;
  config.streamed = ffn_mask(m, 1);
  config.n_slots = n_slots;
  config.prefetch_depth = n_slots - 1;
  config.storage.queue_depth = 4;
  config.make_queue = [plan] {
    return std::make_unique<io::FaultInjectingQueue>(io::make_thread_queue(4, 2), plan);
  };
  return tiers::StreamingProvider::create(m.file, config, ledger, nullptr);
}

std::vector<model::TensorId> ffn_ids(const Model& m, int layer) {
  const auto& lw = m.model->weights().layers[layer];
  return {lw.ffn_gate, lw.ffn_up, lw.ffn_down};
}

// A file of kLayers layers, each with one streamed F32 tensor "blk.N.ffn_up.weight" of
// a size that is no multiple of 4096 (so heads and tails are unaligned), plus a resident
// "token_embd.weight". Bytes are a function of (tensor, position) so any misplaced or
// stale byte shows.
constexpr int kLayers = 8;
constexpr int64_t kCols = 1000, kRows = 3;  // 12000 bytes per tensor

uint8_t pattern(size_t tensor, uint64_t i) {
  return static_cast<uint8_t>(tensor * 131 + i * 7 + (i >> 9));
}

// Removes its file at the end: each test writes its own (ctest runs tests as parallel
// processes, and one shared path let one test rewrite the file another was reading).
struct Layered {
  std::string path;
  gguf::GgufFile file;
  Layered() = default;
  Layered(Layered&& o) noexcept : path(std::move(o.path)), file(std::move(o.file)) {
    o.path.clear();
  }
  ~Layered() {
    if (!path.empty()) std::remove(path.c_str());
  }
};

Layered write_layered() {
  Layered l;
  l.path = testing::TempDir() + "/hypura_layered_" + std::to_string(::getpid()) + "_" +
           testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf";
  gguf::GgufWriter w(4096);  // each tensor's device reads stay within its own pages
  w.add_string("general.architecture", "test");
  w.add_tensor("token_embd.weight", gguf::GgmlType::F32, {kCols, kRows});
  for (int i = 0; i < kLayers; ++i) {
    w.add_tensor("blk." + std::to_string(i) + ".ffn_up.weight", gguf::GgmlType::F32,
                 {kCols, kRows});
  }
  std::vector<std::vector<uint8_t>> data(kLayers + 1, std::vector<uint8_t>(kCols * kRows * 4));
  for (size_t t = 0; t < data.size(); ++t) {
    for (size_t i = 0; i < data[t].size(); ++i) data[t][i] = pattern(t, i);
  }
  EXPECT_TRUE(w.write(l.path, data).is_ok());
  auto file = gguf::GgufFile::open(l.path);
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  l.file = std::move(file).value();
  return l;
}

model::TensorId layer_tensor(int layer) {
  return layer + 1;
}

bool holds_pattern(const compute::WeightView& v, size_t tensor) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  for (uint64_t i = 0; i < kCols * kRows * 4; ++i) {
    if (p[i] != pattern(tensor, i)) return false;
  }
  return true;
}

// gate: holds the streamed reads until the test opens them (null: none waits).
Result<std::unique_ptr<tiers::StreamingProvider>> layered_provider(
    const Layered& l, int n_slots, std::shared_ptr<io::ReadGate> gate,
    tiers::MemoryLedger& ledger) {
  tiers::StreamingConfig config;
  config.streamed.assign(l.file.tensors().size(), true);
  config.streamed[0] = false;
  config.n_slots = n_slots;
  config.prefetch_depth = n_slots - 1;
  config.storage.queue_depth = 4;
  io::FaultPlan plan;
  plan.gate = std::move(gate);
  config.make_queue = [plan] {
    return std::make_unique<io::FaultInjectingQueue>(io::make_thread_queue(4, 2), plan);
  };
  return tiers::StreamingProvider::create(l.file, config, ledger, nullptr);
}

// Three passes over the layers, as the forward pass drives the provider: every layer's
// bytes are right every time, the ring reuses slots in order and reads each layer once
// per pass (plus the read-ahead into the next pass).
TEST(StreamingProvider, RingReadsEveryLayerOncePerPass) {
  Layered l = write_layered();
  tiers::MemoryLedger ledger(0);
  auto p = layered_provider(l, 3, nullptr, ledger);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  tiers::StreamingProvider& sp = *p.value();
  EXPECT_EQ(sp.n_streamed_layers(), kLayers);
  EXPECT_EQ(sp.bytes_per_pass(), uint64_t{kLayers} * kCols * kRows * 4);
  for (int pass = 0; pass < 3; ++pass) {
    compute::WeightView g;
    const model::TensorId embd = 0;
    ASSERT_TRUE(sp.begin_pass().is_ok());
    ASSERT_TRUE(sp.acquire(-1, std::span(&embd, 1), std::span(&g, 1)).is_ok());
    EXPECT_TRUE(holds_pattern(g, 0));
    for (int layer = 0; layer < kLayers; ++layer) {
      const model::TensorId id = layer_tensor(layer);
      compute::WeightView v;
      ASSERT_TRUE(sp.acquire(layer, std::span(&id, 1), std::span(&v, 1)).is_ok());
      EXPECT_TRUE(holds_pattern(v, static_cast<size_t>(id)))
          << "pass " << pass << " layer " << layer;
      sp.release(layer);
    }
    sp.release(-1);
  }
  const tiers::StreamingStats s = sp.stats();
  EXPECT_EQ(s.passes, 3u);
  EXPECT_EQ(s.demand_reads, 0u);
  EXPECT_EQ(s.bytes_read - s.unconsumed_bytes, 3 * sp.bytes_per_pass());
  EXPECT_EQ(s.unconsumed_bytes, 2u * kCols * kRows * 4) << "depth 2 reads into the next pass";
}

// The file bytes of a layered tensor, for the gate.
void open_tensor(io::ReadGate& gate, const Layered& l, model::TensorId id) {
  const auto& t = l.file.tensors()[static_cast<size_t>(id)];
  gate.open(t.offset, t.offset + t.n_bytes);
}

// With reads held at the gate, the slot of a layer in use keeps its layer and its bytes
// while the read-ahead fills the other slots, and no slot is reused before its layer is
// released.
TEST(StreamingProvider, NeverEvictsSlotInUseOrReading) {
  Layered l = write_layered();
  tiers::MemoryLedger ledger(0);
  auto gate = std::make_shared<io::ReadGate>();
  open_tensor(*gate, l, 0);  // the resident embedding loads at once
  auto p = layered_provider(l, 3, gate, ledger);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  io::OpenAtExit open_at_exit{gate};
  tiers::StreamingProvider& sp = *p.value();

  compute::WeightView g;
  const model::TensorId embd = 0;
  ASSERT_TRUE(sp.begin_pass().is_ok());
  ASSERT_TRUE(sp.acquire(-1, std::span(&embd, 1), std::span(&g, 1)).is_ok());
  // Right after the pass begins, reads are in flight for layers 0 and 1 (depth 2).
  auto info = sp.slot_info();
  EXPECT_EQ(info[0].layer, 0);
  EXPECT_EQ(info[1].layer, 1);
  EXPECT_TRUE(info[0].reading && info[1].reading);
  EXPECT_EQ(info[2].layer, -1);

  const model::TensorId id0 = layer_tensor(0), id1 = layer_tensor(1);
  compute::WeightView v0, v1;
  // acquire(0) returns only once layer 0's read is let through, whenever that happens.
  std::atomic<bool> opened{false};
  std::thread opener([&] {
    opened = true;
    open_tensor(*gate, l, id0);
  });
  ASSERT_TRUE(sp.acquire(0, std::span(&id0, 1), std::span(&v0, 1)).is_ok());
  EXPECT_TRUE(opened) << "acquire handed over a slot whose read had not finished";
  opener.join();
  // The read-ahead never touches the slot in use; the ring had room for one more layer.
  info = sp.slot_info();
  EXPECT_TRUE(info[0].in_use);
  EXPECT_EQ(info[0].layer, 0);
  EXPECT_EQ(info[1].layer, 1);
  EXPECT_EQ(info[2].layer, 2);
  EXPECT_TRUE(info[2].reading);
  open_tensor(*gate, l, id1);
  ASSERT_TRUE(sp.acquire(1, std::span(&id1, 1), std::span(&v1, 1)).is_ok());
  // Two slots in use, one reading: nothing is free, so nothing new was issued...
  EXPECT_EQ(sp.stats().layers_read, 3u);
  info = sp.slot_info();
  EXPECT_TRUE(info[2].reading) << "a read in flight is never replaced";
  EXPECT_EQ(info[2].layer, 2);
  // ... and the layers in use kept their bytes while layer 2's read went on.
  EXPECT_TRUE(holds_pattern(v0, static_cast<size_t>(id0)));
  EXPECT_TRUE(holds_pattern(v1, static_cast<size_t>(id1)));
  // Releasing layer 0 frees the oldest slot of the ring, which takes layer 3.
  sp.release(0);
  EXPECT_EQ(sp.stats().layers_read, 4u);
  info = sp.slot_info();
  EXPECT_EQ(info[0].layer, 3);
  EXPECT_TRUE(holds_pattern(v1, static_cast<size_t>(id1)));
  sp.release(1);
  sp.release(-1);
}

// Acquiring a layer out of the cyclic order (a pass restarted after an error) reads it
// on demand and carries on from there.
TEST(StreamingProvider, OutOfOrderAcquireReadsOnDemand) {
  Layered l = write_layered();
  tiers::MemoryLedger ledger(0);
  auto p = layered_provider(l, 2, nullptr, ledger);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  tiers::StreamingProvider& sp = *p.value();
  for (int layer : {5, 6, 2, 3}) {
    const model::TensorId id = layer_tensor(layer);
    compute::WeightView v;
    ASSERT_TRUE(sp.acquire(layer, std::span(&id, 1), std::span(&v, 1)).is_ok());
    EXPECT_TRUE(holds_pattern(v, static_cast<size_t>(id))) << "layer " << layer;
    sp.release(layer);
  }
  EXPECT_EQ(sp.stats().demand_reads, 2u);  // layers 5 and 2
}

// A read that fails with EIO ends the forward pass with an error naming the layer and
// the file; the provider stays usable (the error repeats, nothing crashes or hangs).
TEST(StreamingProvider, FailedReadEndsRequestWithClearError) {
  Model m = open_model("llama-q4_k_m");
  const auto& t = m.file.tensors()[ffn_ids(m, 1)[0]];
  io::FaultPlan plan;
  plan.fail_begin = t.offset;
  plan.fail_end = t.offset + 1;
  tiers::MemoryLedger ledger(0);
  auto p = faulty(m, plan, 3, ledger);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  const std::vector<int32_t> tokens = sequence("A");
  compute::Context ctx(2);
  model::KvCache kv(m.model->hparams(), kNCtx, false);
  model::Forward fwd(m.model, ctx, *p.value(), 64, kNCtx);
  std::vector<float> logits(m.model->hparams().n_vocab);
  for (int attempt = 0; attempt < 2; ++attempt) {
    Status st = fwd.run(tokens.data(), 1, 0, kv, false, logits.data());
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), StatusCode::kIoError) << st.message();
    EXPECT_NE(st.message().find("layer 1"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("llama-q4_k_m.gguf"), std::string::npos) << st.message();
  }
}

// A failed read of a resident tensor fails the load.
TEST(StreamingProvider, FailedResidentLoadIsAnError) {
  Model m = open_model("llama-q4_k_m");
  const auto& t = m.file.tensors()[m.model->weights().token_embd];
  io::FaultPlan plan;
  plan.fail_begin = t.offset;
  plan.fail_end = t.offset + t.n_bytes;
  tiers::MemoryLedger ledger(0);
  auto p = faulty(m, plan, 3, ledger);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("resident"), std::string::npos) << p.status().message();
  EXPECT_EQ(ledger.used(), 0u) << "a failed load gives its memory back";
}

// A config of the wrong size is refused.
TEST(StreamingProvider, RejectsBadConfig) {
  Model m = open_model("llama-q4_k_m");
  tiers::MemoryLedger ledger(0);
  tiers::StreamingConfig config;
  config.streamed.assign(3, false);
  EXPECT_EQ(tiers::StreamingProvider::create(m.file, config, ledger, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

// Tensors outside the layer stack (output head, embeddings) may stream too: they are read
// at the start of each pass and held to its end. Logits stay bit-identical.
TEST(StreamingProvider, StreamsGlobalTensorsToo) {
  Model m = open_model("llama-q4_k_m");
  const std::vector<int32_t> tokens = sequence("B");
  auto resident = tiers::ResidentProvider::load(m.file, nullptr);
  ASSERT_TRUE(resident.is_ok());
  uint64_t passes = 0;
  const std::vector<float> want = run(m, *resident.value(), tokens, 2, &passes);
  tiers::StreamingConfig config;
  config.streamed = ffn_mask(m, 1);
  config.streamed[m.model->weights().output] = true;
  config.streamed[m.model->weights().token_embd] = true;
  tiers::MemoryLedger ledger(0);
  auto p = tiers::StreamingProvider::create(m.file, config, ledger, nullptr);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p.value()->n_streamed_layers(), m.model->hparams().n_layer + 1);
  const std::vector<float> got = run(m, *p.value(), tokens, 2, &passes);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  const tiers::StreamingStats s = p.value()->stats();
  EXPECT_EQ(s.bytes_read - s.unconsumed_bytes, masked_bytes(m, config.streamed) * passes);
}

// A split model's host side: the tensors another device holds (here: the last layer and
// the head) are neither loaded nor served (a clear error), and a two-stage pass with a
// second provider for them gives the one-provider logits bit for bit.
TEST(StreamingProvider, AbsentTensorsAreLeftToTheOtherStage) {
  Model m = open_model("llama-q4_k_m");
  const model::HParams& hp = m.model->hparams();
  const model::WeightMap& wm = m.model->weights();
  const int64_t last = hp.n_layer - 1;
  tiers::StreamingConfig config;
  config.streamed = ffn_mask(m, 1);
  config.absent.assign(m.file.tensors().size(), false);
  for (model::TensorId id : model::layer_tensor_ids(wm, last)) {
    config.absent[id] = true;
    config.streamed[id] = false;
  }
  config.absent[wm.output_norm] = true;
  tiers::MemoryLedger ledger(0);
  auto host = tiers::StreamingProvider::create(m.file, config, ledger, nullptr);
  ASSERT_TRUE(host.is_ok()) << host.status().message();
  uint64_t want_resident = 0;
  for (size_t id = 0; id < config.absent.size(); ++id) {
    if (!config.absent[id] && !config.streamed[id]) want_resident += m.file.tensors()[id].n_bytes;
  }
  EXPECT_GE(host.value()->stats().resident_bytes, want_resident);
  EXPECT_LT(host.value()->stats().resident_bytes,
            want_resident + (uint64_t{64} << 10));  // alignment slack only
  model::TensorId absent_id = wm.output_norm;
  compute::WeightView view;
  const Status refused = host.value()->acquire(-1, std::span(&absent_id, 1), std::span(&view, 1));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("not held in host memory"), std::string::npos)
      << refused.message();

  auto other = tiers::ResidentProvider::load(m.file, nullptr);
  ASSERT_TRUE(other.is_ok());
  compute::Context ctx(2);
  const std::vector<int32_t> tokens = sequence("B");
  const auto logits_of = [&](model::Forward& f) {
    model::KvCache kv(hp, kNCtx, false);
    std::vector<float> out(tokens.size() * static_cast<size_t>(hp.n_vocab));
    EXPECT_TRUE(
        f.run(tokens.data(), static_cast<int64_t>(tokens.size()), 0, kv, true, out.data()).is_ok());
    return out;
  };
  model::Forward whole(m.model, ctx, *other.value(), 64, kNCtx);
  std::vector<model::ForwardStage> stages;
  stages.push_back(
      {std::make_unique<model::CpuBlocks>(hp, wm, ctx, *host.value(), 64, kNCtx), last});
  stages.push_back(
      {std::make_unique<model::CpuBlocks>(hp, wm, ctx, *other.value(), 64, kNCtx), hp.n_layer});
  model::Forward split(m.model, std::move(stages), 64);
  EXPECT_EQ(logits_of(split), logits_of(whole));
}

}  // namespace
}  // namespace hypura::tiers
