// gpt-oss on the CPU, on a synthetic gpt-oss-tiny (hypura synth's preset with the golden
// llama's 384-token vocabulary): the hyperparameters as llama.cpp reads them; batch
// invariance with attention sinks and the sliding window (one batch, chunks, token by
// token, past several 512-key segments, sequences sharing steps); and expert streaming
// under a RAM budget bit-identical to the resident run. Logits against llama.cpp: the
// synthetic-preset goldens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "compute/compute.h"
#include "gguf/gguf.h"
#include "model/cuda_blocks.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/tensor_role.h"
#include "runtime/testing/golden_fixtures.h"
#include "runtime/tiered_weights.h"
#include "scheduler/model_tensors.h"
#include "synth/synth.h"
#if HYPURA_HAVE_CUDA
#include "compute/cuda/device.h"
#endif
#include "tiers/device_weights.h"
#include "tiers/mmap_provider.h"
#include "tiers/testing/resident_provider.h"

namespace hypura::runtime {
namespace {

namespace fs = std::filesystem;

// gpt-oss-tiny in `mix`, written once per test binary.
std::string tiny_file(synth::QuantMix mix) {
  const fs::path dir =
      fs::temp_directory_path() / ("hypura-gpt-oss-test-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path =
      (dir / (std::string("gpt-oss-tiny-") + synth::mix_name(mix) + ".gguf")).string();
  if (fs::exists(path)) return path;
  synth::SynthSpec spec;
  const synth::Preset preset = synth::find_preset("gpt-oss-tiny").value();
  spec.arch = preset.default_arch;
  spec.shape = synth::preset_shape(preset, spec.arch).value();
  spec.vocab_from = golden::kDir + "/llama-f32.gguf";
  spec.mix = mix;
  auto vocab = synth::load_vocab(spec.vocab_from, 0);
  EXPECT_TRUE(vocab.is_ok()) << vocab.status().message();
  if (!vocab.is_ok()) return "";
  spec.shape.n_vocab = vocab->n_vocab;
  auto valid = synth::validate(spec);
  EXPECT_TRUE(valid.is_ok()) << valid.status().message();
  if (!valid.is_ok()) return "";
  const Status st = synth::write_model(*valid, *vocab, path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return st.is_ok() ? path : "";
}

struct Tiny {
  gguf::GgufFile file;
  std::shared_ptr<const model::Model> model;
  std::unique_ptr<tiers::ResidentProvider> provider;
};

std::unique_ptr<Tiny> open_tiny(synth::QuantMix mix = synth::QuantMix::kF16) {
  const std::string path = tiny_file(mix);
  if (path.empty()) return nullptr;
  auto t = std::make_unique<Tiny>();
  auto file = gguf::GgufFile::open(path);
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  if (!file.is_ok()) return nullptr;
  t->file = std::move(file).value();
  auto model = model::Model::create(t->file);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model.is_ok()) return nullptr;
  t->model = model.value();
  auto provider = tiers::ResidentProvider::load(t->file, nullptr);
  EXPECT_TRUE(provider.is_ok()) << provider.status().message();
  if (!provider.is_ok()) return nullptr;
  t->provider = std::move(provider).value();
  return t;
}

// Logits of every position, fed in chunks of `chunk` tokens.
std::vector<float> eval(Tiny& t, const std::vector<int32_t>& tokens, int64_t chunk, bool kv_f32,
                        int64_t n_ctx) {
  const int64_t n_vocab = t.model->hparams().n_vocab;
  compute::Context ctx(2);
  model::KvCache kv(t.model->hparams(), n_ctx, kv_f32);
  model::Forward fwd(t.model, ctx, *t.provider, 64, n_ctx);
  std::vector<float> logits(tokens.size() * n_vocab);
  for (size_t i = 0; i < tokens.size();) {
    const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(tokens.size() - i));
    const Status st = fwd.run(tokens.data() + i, n, static_cast<int64_t>(i), kv, true,
                              logits.data() + i * n_vocab);
    EXPECT_TRUE(st.is_ok()) << st.message();
    i += static_cast<size_t>(n);
  }
  return logits;
}

// Pseudo-random ordinary tokens (ids 3..382).
std::vector<int32_t> tokens(size_t n) {
  std::vector<int32_t> out(n);
  uint32_t state = 777;
  for (auto& t : out)
    t = 3 + static_cast<int32_t>((state = state * 1664525u + 1013904223u) >> 8) % 380;
  return out;
}

TEST(GptOss, HyperparametersAsLlamaCppReadsThem) {
  auto t = open_tiny();
  ASSERT_TRUE(t);
  const model::HParams& hp = t->model->hparams();
  EXPECT_EQ(hp.arch, model::Arch::kGptOss);
  EXPECT_EQ(hp.n_swa, 16);
  EXPECT_TRUE(hp.is_swa_layer(0));  // pattern 2: even layers slide, odd ones see everything
  EXPECT_FALSE(hp.is_swa_layer(1));
  EXPECT_EQ(hp.head_dim, 64);
  EXPECT_EQ(hp.n_rot, 64);
  EXPECT_TRUE(hp.rope_neox);
  EXPECT_FLOAT_EQ(hp.kq_scale, 0.125f);
  EXPECT_FLOAT_EQ(hp.rope_freq_base, 150000.0f);
  EXPECT_FLOAT_EQ(hp.rope_freq_base_swa, 150000.0f);
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 1.0f / 32.0f);
  EXPECT_EQ(hp.n_ctx_orig_yarn, 4096);
  EXPECT_FLOAT_EQ(hp.yarn_ext_factor, 1.0f);
  EXPECT_NEAR(hp.yarn_attn_factor, 1.0f, 1e-6f);  // ggml's own 1 + 0.1 ln 32 remains
  EXPECT_EQ(hp.expert_gating, model::ExpertGating::kSoftmaxWeight);
  EXPECT_EQ(hp.expert_act, model::FfnAct::kSwigluOai);
  EXPECT_EQ(hp.n_expert, 8);
  EXPECT_EQ(hp.n_expert_used, 2);
  const model::LayerWeights& l = t->model->weights().layers[0];
  for (model::TensorId id : {l.bo, l.attn_sinks, l.ffn_router_b, l.ffn_gate_exps_b, l.ffn_up_exps_b,
                             l.ffn_down_exps_b, l.bq, l.bk, l.bv}) {
    EXPECT_NE(id, model::kNone);
  }
}

// One batch, chunks of 7 and token by token give the same bits, with both KV types.
TEST(GptOss, BatchInvariance) {
  auto t = open_tiny();
  ASSERT_TRUE(t);
  const std::vector<int32_t> seq = tokens(41);
  for (bool kv_f32 : {false, true}) {
    const auto one = eval(*t, seq, 64, kv_f32, 64);
    for (int64_t chunk : {7, 1}) {
      const auto other = eval(*t, seq, chunk, kv_f32, 64);
      EXPECT_EQ(0, std::memcmp(one.data(), other.data(), one.size() * 4)) << "chunk " << chunk;
    }
  }
}

// Past several 512-key segments: decode steps of up to 4 tokens merge the segments'
// partials (with the sink joining last) as a prompt batch does; the sliding layer's early
// segments are empty.
TEST(GptOss, BatchInvarianceAcrossKeySegments) {
  auto t = open_tiny();
  ASSERT_TRUE(t);
  const std::vector<int32_t> seq = tokens(1100);
  const auto batched = eval(*t, seq, 64, false, 1152);
  for (int64_t chunk : {1, 4, 5}) {
    const auto stepped = eval(*t, seq, chunk, false, 1152);
    EXPECT_EQ(0, std::memcmp(batched.data(), stepped.data(), batched.size() * 4))
        << "chunks of " << chunk;
  }
}

// A draft tree's rows (sinks, a 16-key sliding window over the branch) against their
// branches decoded alone.
TEST(GptOss, DraftTreeRowsAsTheirBranchesAlone) {
  auto t = open_tiny();
  ASSERT_TRUE(t);
  model::golden::expect_draft_tree_rows_as_branches(t->model, *t->provider, "gpt-oss-tiny");
}

// The same on the GPU: the sinks and the window over a branch read through its slots.
TEST(GptOss, GpuDraftTreeRowsAsTheirBranchesAlone) {
#if HYPURA_HAVE_CUDA
  if (compute::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto t = open_tiny();
  ASSERT_TRUE(t);
  const model::HParams& hp = t->model->hparams();
  auto device =
      tiers::DeviceWeights::read(t->file, std::vector<bool>(t->file.tensors().size(), true));
  ASSERT_TRUE(device.is_ok()) << device.status().message();
  const auto make = [&](int64_t n_ctx) {
    model::golden::OwnedPass p;
    auto blocks =
        model::make_cuda_blocks(hp, t->model->weights(), t->file, *device.value(), 64, n_ctx);
    auto kv = model::KvCache::on_device(hp, n_ctx);
    EXPECT_TRUE(blocks.is_ok() && kv.is_ok());
    if (!blocks.is_ok() || !kv.is_ok()) return p;
    p.kv = std::move(kv).value();
    p.fwd = std::make_unique<model::Forward>(t->model, std::move(blocks).value(), 64);
    return p;
  };
  model::golden::expect_draft_tree_rows_as_branches(make, hp.n_vocab, "gpt-oss-tiny");
#else
  GTEST_SKIP() << "a build without CUDA";
#endif
}

// Under a RAM budget short of part of the experts the planner streams them; the logits
// are bit for bit those of the mmap run (expert biases stay resident).
TEST(GptOss, ExpertStreamingIsBitIdentical) {
  const std::string path = tiny_file(synth::QuantMix::kF16);
  ASSERT_FALSE(path.empty());
  auto file = gguf::GgufFile::open(path);
  ASSERT_TRUE(file.is_ok());
  auto model = model::Model::create(*file);
  ASSERT_TRUE(model.is_ok());
  TierOptions opts = golden::fixture_tier_options();
  auto roomy = TieredWeights::load(*file, opts);
  ASSERT_TRUE(roomy.is_ok()) << roomy.status().message();
  ASSERT_EQ(roomy.value()->mode(), "full-resident");
  const uint64_t need = roomy.value()->plan().memory.ram_total();
  roomy.value().reset();
  auto tensors = scheduler::model_tensors_from_gguf(*file);
  ASSERT_TRUE(tensors.is_ok());
  uint64_t expert_bytes = 0;
  for (const auto& t : tensors->tensors) expert_bytes += model::is_moe_expert(t.role) ? t.bytes : 0;
  opts.plan.budgets.ram_bytes = need - expert_bytes / 3;
  auto tight = TieredWeights::load(*file, opts);
  ASSERT_TRUE(tight.is_ok()) << tight.status().message();
  TieredWeights& w = *tight.value();
  ASSERT_EQ(w.mode(), "expert-streaming");

  auto mmap = tiers::MmapProvider::open(*file);
  ASSERT_TRUE(mmap.is_ok());
  const std::vector<int32_t> seq = tokens(24);
  std::vector<float> want, got;
  ASSERT_TRUE(golden::forward_logits(model.value(), *mmap.value(), seq, 8, &want).is_ok());
  ASSERT_TRUE(golden::forward_logits(model.value(), w.provider(), seq, 8, &got).is_ok());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  EXPECT_GT(w.experts()->stats().bytes_read, 0u);
}

// The GPU forward pass (sinks in both attention kernels, the router bias and gating, expert
// biases and the clamped SwiGLU in the small-batch and prompt MoE paths) against the CPU's,
// which matches llama.cpp: a prompt in one batch (prefill attention, batched experts) and
// token by token (decode attention, grouped experts), rel L2 within the F16-KV golden bound.
TEST(GptOss, GpuMatchesCpu) {
#if HYPURA_HAVE_CUDA
  if (compute::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto t = open_tiny();
  ASSERT_TRUE(t);
  const model::HParams& hp = t->model->hparams();
  ASSERT_TRUE(model::cuda_supports(hp, t->file).is_ok());
  auto device =
      tiers::DeviceWeights::read(t->file, std::vector<bool>(t->file.tensors().size(), true));
  ASSERT_TRUE(device.is_ok()) << device.status().message();
  const std::vector<int32_t> seq = tokens(80);
  const int64_t n_vocab = hp.n_vocab, n_ctx = 128;
  const auto want = eval(*t, seq, 64, false, n_ctx);
  for (int64_t chunk : {int64_t{64}, int64_t{1}}) {
    auto blocks =
        model::make_cuda_blocks(hp, t->model->weights(), t->file, *device.value(), 64, n_ctx);
    ASSERT_TRUE(blocks.is_ok()) << blocks.status().message();
    auto kv = model::KvCache::on_device(hp, n_ctx);
    ASSERT_TRUE(kv.is_ok()) << kv.status().message();
    model::Forward fwd(t->model, std::move(blocks).value(), 64);
    std::vector<float> got(seq.size() * n_vocab);
    for (size_t i = 0; i < seq.size();) {
      const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(seq.size() - i));
      const Status st = fwd.run(seq.data() + i, n, static_cast<int64_t>(i), *kv.value(), true,
                                got.data() + i * n_vocab);
      ASSERT_TRUE(st.is_ok()) << st.message();
      i += static_cast<size_t>(n);
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      den += static_cast<double>(want[i]) * want[i];
    }
    const double rel = std::sqrt(num / den);
    EXPECT_LE(rel, 3e-3) << "chunks of " << chunk;
    std::printf("gpt-oss-tiny gpu vs cpu, chunks of %ld: rel_l2 %.2e\n", static_cast<long>(chunk),
                rel);
  }
#else
  GTEST_SKIP() << "a build without CUDA";
#endif
}

}  // namespace
}  // namespace hypura::runtime
