// ExpertProvider: bit-identical logits to the resident provider on the golden MoE models
// (mixtral-style llama and qwen3moe, F32 and Q4_K_M) for several cache sizes down to one
// slot, with and without speculative prefetch by either predictor; bytes read equal
// (misses + speculative reads) x expert bytes, counted independently by Storage; the
// ledger budget holds; a failed expert read ends the forward pass with a clear error; the
// router predictor guesses the next router's top-k on the observed hidden state.
#include "experts/expert_provider.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>

#include "compute/compute.h"
#include "gguf/gguf.h"
#include "io/testing/fault_queue.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/testing/golden.h"
#include "tiers/testing/resident_provider.h"

namespace hypura::experts {
namespace {

namespace golden = model::golden;
using golden::Model;
using golden::open_model;
using golden::sequence;

struct Case {
  const char* model;
  int slots_per_layer;  // 0: one slot in all
  bool speculate;
  experts::ExpertPredictor predictor = experts::kDefaultExpertPredictor;
  bool budgeted = false;  // the budgeted rule reads every guess (and probability none)
};

class ExpertLogits : public testing::TestWithParam<Case> {};

TEST_P(ExpertLogits, BitIdenticalAndReadsOnlyMisses) {
  const Case c = GetParam();
  Model m = open_model(c.model);
  const auto& hp = m.model->hparams();
  const std::vector<int32_t> tokens = sequence("C");
  auto resident = tiers::ResidentProvider::load(m.file, nullptr);
  ASSERT_TRUE(resident.is_ok()) << resident.status().message();
  std::vector<float> want;
  ASSERT_TRUE(golden::forward_logits(m.model, *resident.value(), tokens, 5, &want).is_ok());

  experts::ExpertConfig config;
  config.cache_experts =
      c.slots_per_layer == 0 ? 1 : c.slots_per_layer * static_cast<uint32_t>(hp.n_layer);
  config.speculate = c.speculate;
  config.predictor = c.predictor;
  config.min_confidence = 0.0;  // speculate whenever the predictor has support
  if (c.budgeted) {
    config.router_min_prob = 1.01;
    config.prefetch_budget_bytes = uint64_t{1} << 30;
    config.prefetch_min_precision = 0.0;
  }
  config.storage.queue_depth = 8;
  tiers::MemoryLedger probe(0);
  {
    auto p = experts::ExpertProvider::create(m.file, config, probe, nullptr);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
  }
  const uint64_t needed = probe.snapshot().peak;
  tiers::MemoryLedger too_small(needed - 1);
  EXPECT_EQ(experts::ExpertProvider::create(m.file, config, too_small, nullptr).status().code(),
            StatusCode::kResourceExhausted);
  tiers::MemoryLedger ledger(needed);
  auto created = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  experts::ExpertProvider& ep = *created.value();
  experts::RoutingTrace trace;
  ep.record_trace(&trace);
  std::vector<float> got;
  Status st = golden::forward_logits(m.model, ep, tokens, 5, &got);
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << "expert-streaming logits differ from resident ones";

  const experts::ExpertStats s = ep.stats();
  EXPECT_EQ(s.bytes_read, s.demand_bytes + s.speculative_bytes);
  EXPECT_EQ(ep.storage_bytes_since_load(), s.bytes_read) << "reads outside the accounting";
  if (std::string(c.model).find("f32") != std::string::npos) {  // equal expert sizes per layer
    EXPECT_EQ(s.bytes_read, (s.misses + s.speculative_reads) * ep.expert_bytes(0));
  }
  EXPECT_EQ(s.lookups, s.hits + s.misses);
  // The stall is split by what was waited for; each read is waited for at most once.
  // (The two parts are summed in another order than the total: equal up to rounding.)
  EXPECT_NEAR(s.stall_seconds, s.stall_miss.seconds + s.stall_prefetched.seconds,
              1e-9 * (1 + s.stall_seconds));
  EXPECT_LE(s.stall_miss.waits, s.misses);
  EXPECT_LE(s.stall_prefetched.waits, s.speculative_used);
  if (!c.speculate || c.predictor == experts::ExpertPredictor::kNone) {
    EXPECT_EQ(s.speculative_reads, 0u);
  }
  // Both predictors are scored whatever reads; the router one guesses every layer after
  // the first of every pass (a batch by its last token).
  EXPECT_EQ(s.router.predicted,
            static_cast<uint64_t>(hp.n_layer - 1) * (tokens.size() - 4) * hp.n_expert_used);
  EXPECT_LE(s.router.correct, s.router.predicted);
  // Two layers: every guess is made one layer ahead, the nearest.
  EXPECT_EQ(s.router_at[0].predicted, s.router.predicted);
  EXPECT_EQ(s.router_at[0].correct, s.router.correct);
  EXPECT_LE(s.router_confident_at[0].predicted, s.router_at[0].predicted);
  if (c.predictor == experts::ExpertPredictor::kCoactivation) {
    EXPECT_EQ(s.router.reads, 0u);
  }
  if (c.predictor == experts::ExpertPredictor::kRouter) {
    EXPECT_EQ(s.coact.reads, 0u);
  }
  EXPECT_LE(s.router.reads_used + s.coact.reads_used, s.router.reads + s.coact.reads);
  // The trace holds every routed (layer, batch); with a cache of every expert, each
  // routed pair is read exactly once (no re-reads, no preloading).
  EXPECT_EQ(trace.records.size(), static_cast<size_t>(hp.n_layer) * (tokens.size() - 4));
  EXPECT_EQ(s.routed_tokens, tokens.size());
  if (c.slots_per_layer >= hp.n_expert && !c.speculate) {
    std::set<std::pair<int, int32_t>> routed;
    for (const auto& r : trace.records) {
      for (int32_t e : r.selected) routed.insert({r.layer, e});
    }
    EXPECT_EQ(s.misses, routed.size());
  }
  EXPECT_LE(ledger.snapshot().peak, ledger.budget());
}

INSTANTIATE_TEST_SUITE_P(
    Golden, ExpertLogits,
    testing::Values(Case{"mixtral-f32", 1, false}, Case{"mixtral-f32", 0, false},
                    Case{"mixtral-f32", 8, false}, Case{"mixtral-f32", 3, true},
                    Case{"mixtral-q4_k_m", 1, true}, Case{"mixtral-q4_k_m", 2, false},
                    Case{"qwen3moe-f32", 1, false}, Case{"qwen3moe-f32", 16, false},
                    Case{"qwen3moe-f32", 6, true}, Case{"qwen3moe-f32", 0, true},
                    Case{"qwen3moe-q4_k_m", 4, true}, Case{"qwen3moe-q4_k_m", 1, false},
                    Case{"mixtral-f32", 1, true, experts::ExpertPredictor::kRouter},
                    Case{"mixtral-q4_k_m", 3, true, experts::ExpertPredictor::kCoactivation},
                    Case{"qwen3moe-f32", 2, true, experts::ExpertPredictor::kRouter},
                    Case{"qwen3moe-q4_k_m", 0, true, experts::ExpertPredictor::kRouter},
                    Case{"qwen3moe-f32", 2, true, experts::ExpertPredictor::kRouter, true},
                    Case{"mixtral-q4_k_m", 1, true, experts::ExpertPredictor::kBoth, true}),
    [](const auto& info) {
      std::string n =
          std::string(info.param.model) + "_" + std::to_string(info.param.slots_per_layer) +
          (info.param.speculate
               ? std::string("_spec_") + experts::expert_predictor_name(info.param.predictor)
               : "") +
          (info.param.budgeted ? "_budgeted" : "");
      for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return n;
    });

// A random hidden state x (one token) and layer 1's router's top-k on it, best first.
void layer1_guess(const Model& m, experts::ExpertProvider& ep, std::vector<float>* x,
                  std::vector<int32_t>* ranked) {
  const auto& hp = m.model->hparams();
  x->resize(static_cast<size_t>(hp.n_embd));  // (n_embd)
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (float& v : *x) v = normal(rng);
  const gguf::TensorInfo* t = m.file.find_tensor("blk.1.ffn_gate_inp.weight");
  ASSERT_NE(t, nullptr);
  const model::TensorId router_id = static_cast<model::TensorId>(t - m.file.tensors().data());
  compute::WeightView router;
  ASSERT_TRUE(ep.acquire(1, std::span(&router_id, 1), std::span(&router, 1)).is_ok());
  std::vector<float> logits(static_cast<size_t>(hp.n_expert));  // (n_expert)
  compute::Context ctx(1);
  ctx.matmul(router, x->data(), 1, logits.data());
  ranked->resize(static_cast<size_t>(hp.n_expert));
  std::iota(ranked->begin(), ranked->end(), 0);
  std::stable_sort(ranked->begin(), ranked->end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  ranked->resize(static_cast<size_t>(hp.n_expert_used));
}

// observe_hidden(0, x) makes layer 1's guess the top-k of layer 1's router on x, read
// speculatively after layer 0's routing; layer 1 then routed to exactly those finds them.
TEST(ExpertProvider, RouterPredictorReadsTheNextRoutersTopK) {
  Model m = open_model("mixtral-f32");
  const auto& hp = m.model->hparams();
  experts::ExpertConfig config;
  config.cache_experts = static_cast<uint32_t>(hp.n_layer * hp.n_expert);  // nothing evicted
  config.predictor = experts::ExpertPredictor::kRouter;
  config.router_lookahead = 1;
  config.router_min_prob = 0.0;  // read every guess
  tiers::MemoryLedger ledger(0);
  auto created = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  experts::ExpertProvider& ep = *created.value();

  std::vector<float> x;
  std::vector<int32_t> want;
  ASSERT_NO_FATAL_FAILURE(layer1_guess(m, ep, &x, &want));
  std::sort(want.begin(), want.end());

  ep.observe_hidden(0, x, 1);
  const std::vector<int32_t> layer0 = {0, 1};  // (1 token, n_expert_used = 2)
  ASSERT_EQ(hp.n_expert_used, 2);
  ep.route(0, layer0, 2);
  EXPECT_EQ(ep.stats().router.reads, want.size()) << "the guess is read before layer 1 routes";
  ep.route(1, want, 2);
  const experts::ExpertStats s = ep.stats();
  EXPECT_EQ(s.router.predicted, want.size());
  EXPECT_EQ(s.router.correct, want.size());
  EXPECT_EQ(s.router.reads_used, want.size());
  EXPECT_EQ(s.router.wasted_bytes, 0u);
  EXPECT_EQ(s.hits, want.size());  // layer 1's experts were already there
  EXPECT_EQ(s.misses, layer0.size());
  EXPECT_EQ(s.bytes_read, (s.misses + s.speculative_reads) * ep.expert_bytes(0));
  for (int32_t e : want) {
    const model::ExpertRequest r[3] = {{m.model->weights().layers[1].ffn_gate_exps, e},
                                       {m.model->weights().layers[1].ffn_up_exps, e},
                                       {m.model->weights().layers[1].ffn_down_exps, e}};
    compute::WeightView v[3];
    ASSERT_TRUE(ep.acquire_experts(1, r, v).is_ok());
  }
  ep.release(1);
  EXPECT_EQ(ep.storage_bytes_since_load(), ep.stats().bytes_read);

  // A probability no guess reaches: guesses are still made and scored, none is read.
  config.router_min_prob = 1.01;
  auto strict = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
  ASSERT_TRUE(strict.is_ok()) << strict.status().message();
  strict.value()->observe_hidden(0, x, 1);
  strict.value()->route(0, layer0, 2);
  strict.value()->route(1, want, 2);
  EXPECT_EQ(strict.value()->stats().router.correct, want.size());
  EXPECT_EQ(strict.value()->stats().router.reads, 0u);
  EXPECT_EQ(strict.value()->stats().speculative_reads, 0u);
}

// The budgeted rule (prefetch_rule.h) where no guess reaches the probability: with a budget
// of one expert per layer and the threshold at 0, the router's best guess for layer 1 is
// read, and only it; with the threshold above chance and nothing scored yet, none is.
TEST(ExpertProvider, BudgetedRuleReadsTheBestGuessWithinTheBudget) {
  Model m = open_model("mixtral-f32");
  const auto& hp = m.model->hparams();
  for (double min_precision : {0.0, 0.9}) {
    experts::ExpertConfig config;
    config.cache_experts = static_cast<uint32_t>(hp.n_layer * hp.n_expert);
    config.predictor = experts::ExpertPredictor::kRouter;
    config.router_min_prob = 1.01;  // no guess reaches it
    tiers::MemoryLedger ledger(0);
    auto probe = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
    ASSERT_TRUE(probe.is_ok()) << probe.status().message();
    config.prefetch_budget_bytes =
        probe.value()->expert_bytes(0) * static_cast<uint64_t>(hp.n_layer);
    config.prefetch_min_precision = min_precision;
    auto created = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
    ASSERT_TRUE(created.is_ok()) << created.status().message();
    experts::ExpertProvider& ep = *created.value();
    std::vector<float> x;
    std::vector<int32_t> ranked;
    ASSERT_NO_FATAL_FAILURE(layer1_guess(m, ep, &x, &ranked));
    ep.observe_hidden(0, x, 1);
    const std::vector<int32_t> layer0 = {0, 1};
    ep.route(0, layer0, 2);
    const experts::ExpertStats s = ep.stats();
    EXPECT_EQ(s.router_prob_reads, 0u);
    if (min_precision > 0.5) {
      EXPECT_EQ(s.speculative_reads, 0u) << "chance (2 of 8) is below 0.9";
      continue;
    }
    EXPECT_EQ(s.router_budget_reads, 1u);
    EXPECT_EQ(s.speculative_reads, 1u);
    // Layer 1 routed to the best guess and another: the guess is a hit, the other a miss.
    std::vector<int32_t> layer1 = {ranked[0], ranked[1]};
    std::sort(layer1.begin(), layer1.end());
    ep.route(1, layer1, 2);
    EXPECT_EQ(ep.stats().hits, 1u);
    EXPECT_EQ(ep.stats().router.reads_used, 1u);
    EXPECT_EQ(ep.prefetch_rule().scored(1, 0), 1u) << "rank 0 was uncached when guessed";
    EXPECT_EQ(ep.storage_bytes_since_load(), ep.stats().bytes_read);
  }
}

// order_experts puts the batch's cached experts before those still to be read (the model
// computes in that order); with order_by_arrival off it keeps ascending ids.
TEST(ExpertProvider, OrdersCachedExpertsBeforeReads) {
  Model m = open_model("mixtral-f32");
  const auto& hp = m.model->hparams();
  const auto& layer0 = m.model->weights().layers[0];
  for (bool by_arrival : {true, false}) {
    experts::ExpertConfig config;
    config.cache_experts = static_cast<uint32_t>(hp.n_layer * hp.n_expert);
    config.speculate = false;
    config.order_by_arrival = by_arrival;
    tiers::MemoryLedger ledger(0);
    auto created = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
    ASSERT_TRUE(created.is_ok()) << created.status().message();
    experts::ExpertProvider& ep = *created.value();
    const std::vector<int32_t> first = {5, 6};  // (1 token, n_expert_used = 2)
    ep.route(0, first, 2);
    for (int32_t e : first) {
      const model::ExpertRequest r[3] = {
          {layer0.ffn_gate_exps, e}, {layer0.ffn_up_exps, e}, {layer0.ffn_down_exps, e}};
      compute::WeightView v[3];
      ASSERT_TRUE(ep.acquire_experts(0, r, v).is_ok());
    }
    ep.release(0);
    const std::vector<int32_t> second = {2, 6};  // 2 is a miss, 6 cached
    ep.route(0, second, 2);
    std::vector<int32_t> order = second;
    ep.order_experts(0, order);
    EXPECT_EQ(order, (by_arrival ? std::vector<int32_t>{6, 2} : second));
  }
}

// Bench's I/O reference reads into cache slots: it reports a rate, stays out of the
// read accounting, and leaves a cache that still serves bit-identical logits.
TEST(ExpertProvider, IoReferenceLeavesTheCacheCorrect) {
  Model m = open_model("mixtral-f32");
  const std::vector<int32_t> tokens = sequence("B");
  auto resident = tiers::ResidentProvider::load(m.file, nullptr);
  ASSERT_TRUE(resident.is_ok()) << resident.status().message();
  std::vector<float> want;
  ASSERT_TRUE(golden::forward_logits(m.model, *resident.value(), tokens, 3, &want).is_ok());
  experts::ExpertConfig config;
  config.cache_experts = 6;
  tiers::MemoryLedger ledger(0);
  auto created = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  experts::ExpertProvider& ep = *created.value();
  std::vector<float> got;
  ASSERT_TRUE(golden::forward_logits(m.model, ep, tokens, 3, &got).is_ok());
  const experts::ExpertStats before = ep.stats();
  auto bps = ep.measure_io_only_bps(0.05);
  ASSERT_TRUE(bps.is_ok()) << bps.status().message();
  EXPECT_GT(bps.value(), 0);
  EXPECT_EQ(ep.stats().bytes_read, before.bytes_read);
  EXPECT_EQ(ep.storage_bytes_since_load(), before.bytes_read)
      << "reference reads counted as the model's";
  ASSERT_TRUE(golden::forward_logits(m.model, ep, tokens, 3, &got).is_ok());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  EXPECT_EQ(ep.storage_bytes_since_load(), ep.stats().bytes_read);
}

// Every read of one layer's up experts fails: the pass ends with an error naming the
// expert and the file; the resident weights loaded fine.
TEST(ExpertProvider, FailedExpertReadEndsThePassWithAClearError) {
  Model m = open_model("qwen3moe-f32");
  const model::TensorId up = m.model->weights().layers[1].ffn_up_exps;
  const auto& t = m.file.tensors()[up];
  io::FaultPlan plan;
  plan.fail_begin = t.offset;
  plan.fail_end = t.offset + t.n_bytes;
  experts::ExpertConfig config;
  config.cache_experts = 4;
  config.storage.queue_depth = 4;
  config.make_queue = [plan] {
    return std::make_unique<io::FaultInjectingQueue>(io::make_thread_queue(4, 2), plan);
  };
  tiers::MemoryLedger ledger(0);
  auto p = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  std::vector<float> logits;
  const Status st = golden::forward_logits(m.model, *p.value(), sequence("B"), 3, &logits);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("of layer 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("qwen3moe-f32.gguf"), std::string::npos) << st.message();
}

// A wrong guess whose read is still queued when its layer routes elsewhere is cancelled
// (held at the gate: layer 1's expert bytes), its slot is never handed out, and the expert
// routed to later is read afresh with the file's bytes.
TEST(ExpertProvider, CancelsWrongGuessesStillQueued) {
  Model m = open_model("mixtral-f32");
  const auto& hp = m.model->hparams();
  const auto& w = m.model->weights().layers[1];
  const model::TensorId held[3] = {w.ffn_gate_exps, w.ffn_up_exps, w.ffn_down_exps};
  io::FaultPlan plan;
  plan.gate = std::make_shared<io::ReadGate>();
  for (size_t id = 0; id < m.file.tensors().size(); ++id) {
    if (std::find(std::begin(held), std::end(held), static_cast<model::TensorId>(id)) !=
        std::end(held))
      continue;
    const auto& t = m.file.tensors()[id];
    plan.gate->open(t.offset, t.offset + t.n_bytes);
  }
  io::OpenAtExit open_at_exit{plan.gate};
  experts::ExpertConfig config;
  config.cache_experts = static_cast<uint32_t>(hp.n_layer * hp.n_expert);
  config.predictor = experts::ExpertPredictor::kRouter;
  config.router_min_prob = 0.0;    // read every guess
  config.storage.queue_depth = 8;  // background reads one device read at a time
  config.storage.request_bytes = 4096;
  config.make_queue = [plan] {
    return std::make_unique<io::FaultInjectingQueue>(io::make_thread_queue(8, 2), plan);
  };
  tiers::MemoryLedger ledger(0);
  auto created = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  experts::ExpertProvider& ep = *created.value();
  std::vector<float> x;
  std::vector<int32_t> guessed;
  ASSERT_NO_FATAL_FAILURE(layer1_guess(m, ep, &x, &guessed));
  std::vector<int32_t> others;
  for (int32_t e = 0; e < hp.n_expert && others.size() < 2; ++e)
    if (std::find(guessed.begin(), guessed.end(), e) == guessed.end()) others.push_back(e);
  ep.observe_hidden(0, x, 1);
  ep.route(0, std::vector<int32_t>{0, 1}, 2);
  ASSERT_EQ(ep.stats().speculative_reads, 2u);
  ep.route(1, others, 2);  // the guesses were wrong
  EXPECT_EQ(ep.stats().cancelled_reads, 2u);
  EXPECT_GT(ep.stats().cancelled_bytes, 0u);
  plan.gate->open_all();
  // Layer 1 routed to a guessed expert at the next token: a fresh read, bytes intact.
  std::vector<int32_t> next = {std::min(guessed[0], others[0]), std::max(guessed[0], others[0])};
  ep.route(0, std::vector<int32_t>{0, 1}, 2);
  ep.route(1, next, 2);
  auto resident = tiers::ResidentProvider::load(m.file, nullptr);
  ASSERT_TRUE(resident.is_ok()) << resident.status().message();
  for (int part = 0; part < 3; ++part) {
    const model::ExpertRequest r = {held[part], guessed[0]};
    compute::WeightView v, whole;
    ASSERT_TRUE(ep.acquire_experts(1, std::span(&r, 1), std::span(&v, 1)).is_ok());
    ASSERT_TRUE(
        resident.value()->acquire(1, std::span(&held[part], 1), std::span(&whole, 1)).is_ok());
    const uint64_t bytes =
        m.file.tensors()[held[part]].n_bytes / static_cast<uint64_t>(hp.n_expert);
    EXPECT_EQ(
        std::memcmp(v.data, static_cast<const uint8_t*>(whole.data) + guessed[0] * bytes, bytes), 0)
        << "part " << part;
  }
  ep.release(1);
  const experts::ExpertStats s = ep.stats();
  EXPECT_EQ(s.wasted_bytes, 2 * ep.expert_bytes(1));
  EXPECT_EQ(ep.storage_bytes_since_load(), s.bytes_read);
}

// Statistics learned in one run are saved and loaded by the next provider of the file.
TEST(ExpertProvider, CoactivationStatisticsPersist) {
  Model m = open_model("mixtral-f32");
  const std::string dir = testing::TempDir() + "/hypura_coact_test_" + std::to_string(::getpid());
  const std::string path = dir + "/stats.json";
  std::filesystem::remove(path);
  experts::ExpertConfig config;
  config.cache_experts = 4;
  config.stats_path = path;
  tiers::MemoryLedger ledger(0);
  std::vector<double> seen;
  {
    auto p = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
    ASSERT_TRUE(p.is_ok());
    EXPECT_TRUE(p.value()->routing_frequency().empty());  // nothing recorded, nothing seen
    std::vector<float> logits;
    ASSERT_TRUE(golden::forward_logits(m.model, *p.value(), sequence("C"), 5, &logits).is_ok());
    seen = p.value()->routing_frequency();  // what bench's same-run prediction plans with
    ASSERT_TRUE(p.value()->save_stats().is_ok());
  }
  auto loaded = experts::CoactivationStats::load(path, 2, 8);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(seen, loaded->frequencies());  // the planner's next start sees the same routing
  EXPECT_EQ(seen.size(), 2u * 8u);
  EXPECT_EQ(loaded->tokens(), sequence("C").size());
  uint64_t layer0 = 0;
  for (int e = 0; e < 8; ++e) layer0 += loaded->frequency(0, e);
  EXPECT_EQ(layer0, sequence("C").size() * 2);                          // top-2 per token
  EXPECT_FALSE(experts::CoactivationStats::load(path, 2, 16).is_ok());  // another geometry
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hypura::experts
