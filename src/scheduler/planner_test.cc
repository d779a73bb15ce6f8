#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "common/size.h"
#include "profiler/hardware_profile.h"
#include "scheduler/plan.h"
#include "scheduler/render.h"
#include "scheduler/testing/shapes.h"

namespace hypura::scheduler {
namespace {

using profiler::HardwareProfile;

HardwareProfile fixture(const std::string& name) {
  auto p = profiler::load_profile_file(std::string(HYPURA_SOURCE_DIR) + "/src/scheduler/testdata/" +
                                       name);
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  return p.is_ok() ? *p : HardwareProfile{};
}

Plan must_place(const ModelTensors& m, const HardwareProfile& p, const Budgets& b = {}) {
  auto plan = place(m, p, b);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  return plan.is_ok() ? *plan : Plan{};
}

double gib(uint64_t bytes) {
  return static_cast<double>(bytes) / (1ull << 30);
}

void print_plan(const char* what, const Plan& plan) {
  std::printf(
      "%-40s %-20s %7.3f tok/s  storage %.2f GiB/token  pool %u x %.0f MiB depth %d  experts "
      "cached %u\n",
      what, mode_name(plan.mode), plan.prediction.tok_per_s,
      gib(plan.prediction.storage_bytes_per_token), plan.pool_slots,
      plan.pool_slot_bytes / 1048576.0, plan.prefetch_depth, plan.expert_cache_experts);
}

// The synthetic shapes must be the models the seeds talk about: published sizes (GiB).
TEST(Shapes, SizesMatchThePublishedFiles) {
  EXPECT_NEAR(gib(synthetic_model(qwen25_14b_q4km()).total_bytes()), 8.4, 8.4 * 0.06);
  EXPECT_NEAR(gib(synthetic_model(mixtral_8x7b_q5km()).total_bytes()), 30.9, 30.9 * 0.06);
  EXPECT_NEAR(gib(synthetic_model(llama33_70b_q4km()).total_bytes()), 39.6, 39.6 * 0.05);
  EXPECT_NEAR(gib(synthetic_model(llama3_8b_q4km()).total_bytes()), 4.6, 4.6 * 0.05);
  // Kimi K2: ~1.03T parameters; Q4_K_M-like mix lands near 580 GB.
  double kimi = gib(synthetic_model(kimi_k2_q4km()).total_bytes());
  EXPECT_GT(kimi, 500);
  EXPECT_LT(kimi, 640);
}

// MXFP4_MOE on a gpt-oss-20b-like shape: experts MXFP4 (17 bytes per 32 weights), every
// other matrix Q8_0, norms and the router F32.
TEST(Shapes, Mxfp4MoeMix) {
  ShapeSpec s = qwen3_30b_a3b_q4km();
  s.n_embd = 2880, s.n_layer = 24, s.n_head = 64, s.n_head_kv = 8, s.head_dim = 64;
  s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 2880, s.n_vocab = 201088;
  s.mix = synth::QuantMix::kMxfp4Moe;
  uint64_t expert_bytes = 0;
  for (const auto& t : synthetic_model(s).tensors) {
    const gguf::GgmlType want =
        model::is_moe_expert(t.role) ? gguf::GgmlType::MXFP4
        : t.role == model::TensorRole::kMoeRouter || t.name.find("norm") != std::string::npos
            ? gguf::GgmlType::F32
            : gguf::GgmlType::Q8_0;
    EXPECT_EQ(t.type, want) << t.name;
    if (model::is_moe_expert(t.role)) expert_bytes += t.bytes;
  }
  EXPECT_EQ(expert_bytes, uint64_t{24} * 3 * 32 * 2880 * 2880 / 32 * 17);
}

TEST(Shapes, TiedEmbeddingsAreReadWholeEveryToken) {
  ShapeSpec s = llama3_8b_q4km();
  s.tied_embeddings = true;
  ModelTensors m = synthetic_model(s);
  for (const auto& t : m.tensors) {
    if (t.role == model::TensorRole::kTokenEmbedding) {
      EXPECT_DOUBLE_EQ(t.access_per_token, 1.0);
    }
  }
}

TEST(Shapes, ExpertAccessIsUsedOverTotal) {
  ModelTensors m = synthetic_model(mixtral_8x7b_q5km());
  for (const auto& t : m.tensors) {
    if (model::is_moe_expert(t.role)) {
      EXPECT_DOUBLE_EQ(t.access_per_token, 0.25);
    }
    if (t.role == model::TensorRole::kTokenEmbedding) {
      EXPECT_DOUBLE_EQ(t.access_per_token, 1.0 / 32000);
    }
  }
}

// Issue 5: the original's three models on its M1 Max rig.
TEST(OriginalRig, ThreeModelsGetTheirThreeModes) {
  HardwareProfile m1 = fixture("m1_max_32g.json");
  Plan qwen = must_place(synthetic_model(qwen25_14b_q4km()), m1);
  Plan mixtral = must_place(synthetic_model(mixtral_8x7b_q5km()), m1);
  Plan llama = must_place(synthetic_model(llama33_70b_q4km()), m1);
  print_plan("Qwen2.5-14B Q4_K_M on M1 Max 32G", qwen);
  print_plan("Mixtral-8x7B Q5_K_M on M1 Max 32G", mixtral);
  print_plan("Llama-3.3-70B Q4_K_M on M1 Max 32G", llama);
  EXPECT_EQ(qwen.mode, Mode::kFullResident);
  EXPECT_EQ(mixtral.mode, Mode::kExpertStreaming);
  EXPECT_EQ(llama.mode, Mode::kDenseFfnStreaming);
  // Full-resident: all on the GPU working set, no storage traffic.
  EXPECT_EQ(qwen.prediction.storage_bytes_per_token, 0u);
  EXPECT_EQ(qwen.bytes_on(synthetic_model(qwen25_14b_q4km()), Tier::kStorage), 0u);
  EXPECT_GT(mixtral.expert_cache_experts, 0u);
  EXPECT_GT(llama.pool_slots, 0u);
  EXPECT_GT(llama.prefetch_depth, 0);
  // The original measured 21 / 2.2 / 0.3 tok/s; the model should be in that league.
  EXPECT_GT(qwen.prediction.tok_per_s, 10);
  EXPECT_GT(mixtral.prediction.tok_per_s, 0.5);
  EXPECT_LT(mixtral.prediction.tok_per_s, 20);
  EXPECT_GT(llama.prediction.tok_per_s, 0.1);
  EXPECT_LT(llama.prediction.tok_per_s, 1.5);
}

TEST(CpuOnly, TwentyFourGigMachineWithAndWithoutCgroup) {
  ModelTensors m8b = synthetic_model(llama3_8b_q4km());
  HardwareProfile free = fixture("cpu_24g.json");
  HardwareProfile boxed = fixture("cpu_24g_cgroup3g.json");
  Plan a = must_place(m8b, free);
  Plan b = must_place(m8b, boxed);
  Budgets three_g;
  three_g.ram_bytes = 3ull << 30;
  three_g.n_ctx = 1024;
  Plan c = must_place(m8b, free, three_g);
  print_plan("8b on 24G", a);
  print_plan("8b on 24G in a 3G cgroup", b);
  print_plan("8b on 24G --ram-budget 3G --context 1024", c);
  EXPECT_EQ(a.mode, Mode::kFullResident);
  EXPECT_EQ(b.mode, Mode::kDenseFfnStreaming);
  EXPECT_EQ(c.mode, Mode::kDenseFfnStreaming);
  EXPECT_LE(b.memory.ram_total(), 3ull << 30);
  EXPECT_LE(c.memory.ram_total(), 3ull << 30);
  for (Tier t : a.tiers) EXPECT_NE(t, Tier::kGpu);
  // The 70b showcase of issue 6: no budget flag on the 24 GiB machine.
  Plan big = must_place(synthetic_model(llama33_70b_q4km()), free);
  print_plan("70b on 24G", big);
  EXPECT_EQ(big.mode, Mode::kDenseFfnStreaming);
  EXPECT_LE(big.memory.ram_total(), big.memory.ram_limit);
}

// A profile's decode rates (the CPU kernels' measured speed per weight type) set the
// compute time of resident weights; without them the memory bandwidth does.
TEST(CpuOnly, DecodeRatesPriceResidentCompute) {
  ModelTensors m8b = synthetic_model(llama3_8b_q4km());
  HardwareProfile p = fixture("cpu_24g.json");
  ASSERT_TRUE(p.cpu.decode.empty());
  const Plan by_bus = must_place(m8b, p);
  // Every weight type of the file at a tenth of what the bus gives.
  const double slow = p.memory.read_bandwidth_bps / 10;
  for (const auto& t : m8b.tensors) {
    if (t.type != gguf::GgmlType::F32 && p.cpu.decode_bps(t.type) == 0)
      p.cpu.decode.push_back({t.type, slow});
  }
  const Plan by_kernels = must_place(m8b, p);
  EXPECT_EQ(by_kernels.mode, Mode::kFullResident);
  EXPECT_GT(by_kernels.prediction.compute_s, 5 * by_bus.prediction.compute_s);
  uint64_t weights = 0;
  for (const auto& t : m8b.tensors) {
    if (t.type != gguf::GgmlType::F32)
      weights += static_cast<uint64_t>(t.access_per_token * static_cast<double>(t.bytes));
  }
  // The matrices' bytes at the slow rate, within the norms' and layers' small overheads.
  EXPECT_NEAR(by_kernels.prediction.compute_s, static_cast<double>(weights) / slow,
              0.05 * static_cast<double>(weights) / slow);
}

TEST(KimiK2, PlansA1TParameterMoEOn32Gig) {
  ModelTensors kimi = synthetic_model(kimi_k2_q4km());
  Plan plan = must_place(kimi, fixture("cpu_32g.json"));
  print_plan("Kimi-K2 1T on CPU-only 32G", plan);
  Plan m1 = must_place(kimi, fixture("m1_max_32g.json"));
  print_plan("Kimi-K2 1T on M1 Max 32G", m1);
  EXPECT_EQ(plan.mode, Mode::kExpertStreaming);
  EXPECT_GT(plan.prediction.tok_per_s, 0);
  EXPECT_LE(plan.memory.ram_total(), plan.memory.ram_limit);
  // Per token: 8 of 384 experts in 60 layers, nearly all missing the cache.
  EXPECT_GT(gib(plan.prediction.storage_bytes_per_token), 5);
  std::printf("%s", plan_to_text(plan, kimi).substr(0, 1500).c_str());
}

TEST(Safety, PeakMemoryStaysWithinEveryBudget) {
  HardwareProfile p = fixture("cpu_24g.json");
  for (const ShapeSpec& shape : {llama3_8b_q4km(), mixtral_8x7b_q5km(), qwen3_30b_a3b_q4km()}) {
    ModelTensors m = synthetic_model(shape);
    for (uint64_t budget_mib : {1536, 2048, 3072, 6144, 12288, 20480}) {
      Budgets b;
      b.ram_bytes = budget_mib << 20;
      b.n_ctx = 2048;
      auto plan = place(m, p, b);
      if (!plan.is_ok()) {
        EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted) << plan.status().message();
        continue;
      }
      const MemoryPlan& mem = plan->memory;
      EXPECT_LE(mem.ram_total(), *b.ram_bytes) << shape.name << " at " << budget_mib << " MiB";
      EXPECT_EQ(mem.kv_ram + mem.kv_gpu,
                m.kv_elements_per_token * 2048 * 2 / m.n_layer * m.n_layer);
      EXPECT_GT(mem.work_ram, 0u);
      EXPECT_EQ(mem.ram_weights + plan->bytes_on(m, Tier::kStorage), m.total_bytes());
    }
  }
}

TEST(Safety, TooSmallABudgetIsAClearError) {
  Budgets b;
  b.ram_bytes = 256ull << 20;
  auto plan = place(synthetic_model(llama3_8b_q4km()), fixture("cpu_24g.json"), b);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("no placement fits"), std::string::npos);
}

TEST(Planner, IsDeterministic) {
  ModelTensors m = synthetic_model(llama33_70b_q4km());
  HardwareProfile p = fixture("cpu_24g.json");
  Plan a = must_place(m, p), b = must_place(m, p);
  EXPECT_EQ(a.tiers, b.tiers);
  EXPECT_EQ(a.prediction.seconds_per_token, b.prediction.seconds_per_token);
  EXPECT_EQ(a.explanation, b.explanation);
}

// Issue 5: never worse than the simple alternatives under the same cost model.
TEST(Planner, NeverWorseThanLayersInOrderOrMmap) {
  for (const char* profile : {"cpu_24g.json", "m1_max_32g.json"}) {
    HardwareProfile p = fixture(profile);
    for (const ShapeSpec& shape : {llama3_8b_q4km(), llama33_70b_q4km(), mixtral_8x7b_q5km()}) {
      ModelTensors m = synthetic_model(shape);
      for (uint64_t budget_gib : {3, 6, 12, 20, 28}) {
        Budgets b;
        b.ram_bytes = budget_gib << 30;
        auto plan = place(m, p, b);
        if (!plan.is_ok()) continue;
        double ours = plan->prediction.seconds_per_token;
        auto layers = place_layers_in_order(m, p, b);
        if (layers.is_ok()) {
          EXPECT_LE(ours, layers->prediction.seconds_per_token * (1 + 1e-9))
              << shape.name << " " << budget_gib << " GiB on " << profile;
        }
        EXPECT_LE(ours, predict_mmap(m, p, b).seconds_per_token * (1 + 1e-9))
            << shape.name << " " << budget_gib << " GiB on " << profile;
      }
    }
  }
}

// The bound stated in docs/PLANNER.md, checked exhaustively on a small model: the plan's
// time per token is within one streamed group's read time of the best of all placements
// that stream any subset of the per-layer groups at any depth.
TEST(Planner, WithinOneGroupOfTheExhaustiveOptimum) {
  ShapeSpec s = llama3_8b_q4km();
  s.n_layer = 8;
  s.n_vocab = 4096;
  ModelTensors m = synthetic_model(s);
  HardwareProfile p = fixture("cpu_24g.json");
  // Per-layer groups: ffn (gate, up, down) and attention (q, k, v, o).
  std::vector<std::vector<size_t>> groups;
  uint64_t largest = 0;
  for (int l = 0; l < s.n_layer; ++l) {
    std::vector<size_t> ffn, attn;
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      if (m.tensors[i].layer != l) continue;
      if (model::is_dense_ffn(m.tensors[i].role)) ffn.push_back(i);
      if (model::is_attention(m.tensors[i].role) && !model::is_norm(m.tensors[i].role))
        attn.push_back(i);
    }
    uint64_t fb = 0;
    for (size_t i : ffn) fb += m.tensors[i].bytes;
    largest = std::max(largest, fb);
    groups.push_back(ffn);
    groups.push_back(attn);
  }
  int planned = 0;
  for (double fraction : {0.7, 0.8, 0.9, 1.0}) {
    Budgets b;
    uint64_t budget_mib =
        static_cast<uint64_t>(fraction * static_cast<double>(m.total_bytes() >> 20)) + 150;
    b.ram_bytes = budget_mib << 20;
    b.n_ctx = 256;
    b.n_batch = 32;
    auto plan = place(m, p, b);
    if (!plan.is_ok()) continue;  // below the smallest streaming footprint
    ++planned;
    double best = 1e30;
    for (uint32_t mask = 0; mask < (1u << groups.size()); ++mask) {
      for (int depth = 1; depth <= 2; ++depth) {
        Plan cand;
        cand.tiers.assign(m.tensors.size(), Tier::kRam);
        for (size_t g = 0; g < groups.size(); ++g) {
          if (mask & (1u << g)) {
            for (size_t i : groups[g]) cand.tiers[i] = Tier::kStorage;
          }
        }
        cand.prefetch_depth = depth;
        if (evaluate(m, p, b, CostModel{}, cand))
          best = std::min(best, cand.prediction.seconds_per_token);
      }
    }
    double bound = static_cast<double>(largest) / p.storage.seq_read_bps;
    std::printf("budget %4llu MiB: planner %.4f s/token, exhaustive best %.4f, bound %.4f\n",
                static_cast<unsigned long long>(budget_mib), plan->prediction.seconds_per_token,
                best, bound);
    EXPECT_LE(plan->prediction.seconds_per_token, best + bound + 1e-9);
  }
  EXPECT_GE(planned, 3);
}

// Issue 8: a MoE model that does not fit but whose non-expert tensors, fixed costs and a
// small cache do gets expert streaming: every non-expert tensor resident, every expert
// tensor on storage, and the cache taking the rest of the budget less the margin.
TEST(ExpertStreaming, ChosenUnderTightBudgetsForMoeShapes) {
  HardwareProfile p = fixture("cpu_24g.json");
  const CostModel cost;
  for (const ShapeSpec& shape : {moe_preset_q4km(), mixtral_8x7b_q4km(), qwen3_30b_a3b_q4km()}) {
    ModelTensors m = synthetic_model(shape);
    for (uint64_t budget_gib : {2, 3}) {
      Budgets b;
      b.ram_bytes = budget_gib << 30;
      b.n_ctx = 1024;
      Plan plan = must_place(m, p, b);
      char what[96];
      std::snprintf(what, sizeof what, "%s --ram-budget %lluG", shape.name.c_str(),
                    static_cast<unsigned long long>(budget_gib));
      print_plan(what, plan);
      ASSERT_EQ(plan.mode, Mode::kExpertStreaming) << what;
      for (size_t i = 0; i < m.tensors.size(); ++i) {
        const bool expert = model::is_moe_expert(m.tensors[i].role);
        EXPECT_EQ(plan.tiers[i] == Tier::kStorage, expert) << m.tensors[i].name << " " << what;
      }
      const MemoryPlan& mem = plan.memory;
      EXPECT_EQ(mem.pool, 0u);
      EXPECT_LE(mem.ram_total(), *b.ram_bytes) << what;
      // The cache takes the rest: one slot more would break the margin (which includes
      // the resident load's alignment slack, one 4 KiB block at each end of a run of
      // neighbouring resident tensors).
      uint64_t margin = std::max(cost.expert_cache_margin_min_bytes,
                                 static_cast<uint64_t>(cost.expert_cache_margin * *b.ram_bytes));
      for (size_t i = 0; i < plan.tiers.size(); ++i) {
        const bool starts_run =
            plan.tiers[i] == Tier::kRam && (i == 0 || plan.tiers[i - 1] != Tier::kRam);
        margin += starts_run ? 2 * 4096 : 0;
      }
      EXPECT_LE(mem.ram_total() + margin, *b.ram_bytes) << what;
      EXPECT_GT(mem.ram_total() + margin + plan.expert_slot_bytes, *b.ram_bytes) << what;
      EXPECT_EQ(mem.expert_cache, plan.expert_cache_experts * plan.expert_slot_bytes);
      // Uniform hit rate: cached experts over all experts; misses n_used x (1 - hit) per layer.
      const double all = static_cast<double>(m.n_expert * m.n_layer);
      EXPECT_NEAR(plan.prediction.expert_hit_rate, plan.expert_cache_experts / all, 1e-9);
      EXPECT_NEAR(plan.prediction.expert_misses_per_token,
                  m.n_layer * m.n_expert_used * (1 - plan.prediction.expert_hit_rate), 1e-6);
      EXPECT_GT(plan.prediction.tok_per_s, 0);
      const std::string text = plan_to_text(plan, m);
      EXPECT_NE(text.find("Expert streaming: every non-expert tensor resident"), std::string::npos);
    }
  }
}

// With routing recorded in earlier runs the expected hit rate is the share of routings
// that went to the most often routed experts the cache can hold; equal frequencies give
// the uniform figure, skewed ones more hits and a faster prediction.
TEST(ExpertStreaming, HitRateFromRecordedRouting) {
  HardwareProfile p = fixture("cpu_24g.json");
  ModelTensors m = synthetic_model(moe_preset_q4km());
  Budgets b;
  b.ram_bytes = uint64_t{3} << 30;
  b.n_ctx = 1024;
  const Plan uniform = must_place(m, p, b);
  ASSERT_EQ(uniform.mode, Mode::kExpertStreaming);
  EXPECT_FALSE(uniform.prediction.expert_hit_rate_recorded);
  const size_t n = static_cast<size_t>(m.n_layer * m.n_expert);

  m.expert_frequency.assign(n, 7.0);
  const Plan equal = must_place(m, p, b);
  EXPECT_TRUE(equal.prediction.expert_hit_rate_recorded);
  EXPECT_NEAR(equal.prediction.expert_hit_rate, uniform.prediction.expert_hit_rate,
              0.5 / m.n_expert);

  // Every layer routes to experts 0 and 1 nine times as often as to each of the others:
  // a cache of c experts per layer (c >= 2) holds 0, 1 and c - 2 others.
  for (size_t i = 0; i < n; ++i) m.expert_frequency[i] = i % m.n_expert < 2 ? 9.0 : 1.0;
  const Plan skewed = must_place(m, p, b);
  ASSERT_EQ(skewed.expert_cache_experts, uniform.expert_cache_experts);
  const double per_layer = static_cast<double>(skewed.expert_cache_experts) / m.n_layer;
  const double total = 2 * 9.0 + (m.n_expert - 2);
  const int whole = static_cast<int>(per_layer);
  // The greedy cache takes the hot pairs of every layer first, then the cold ones in
  // layer order: `whole` or `whole + 1` per layer; on average per_layer.
  const double want = (2 * 9.0 + (per_layer - 2)) / total;
  EXPECT_GE(whole, 2);
  EXPECT_NEAR(skewed.prediction.expert_hit_rate, want, 1e-9);
  EXPECT_GT(skewed.prediction.expert_hit_rate, uniform.prediction.expert_hit_rate + 0.05);
  EXPECT_LT(skewed.prediction.expert_misses_per_token, uniform.prediction.expert_misses_per_token);
  EXPECT_GE(skewed.prediction.tok_per_s, uniform.prediction.tok_per_s);
  EXPECT_NE(plan_to_text(skewed, m).find("recorded in earlier runs"), std::string::npos);

  m.expert_frequency.resize(n - 1);  // another geometry: ignored
  EXPECT_FALSE(must_place(m, p, b).prediction.expert_hit_rate_recorded);
}

// Slots are laid out as ExpertProvider lays them out: each of the three slices rounded
// up to 4 KiB plus one spare block, in the layer with the largest experts.
TEST(ExpertStreaming, SlotBytesMatchTheProviderLayout) {
  ModelTensors m = synthetic_model(moe_preset_q4km());
  Budgets b;
  b.ram_bytes = 3ull << 30;
  b.n_ctx = 1024;
  Plan plan = must_place(m, fixture("cpu_24g.json"), b);
  std::vector<uint64_t> per_layer(static_cast<size_t>(m.n_layer), 0);
  for (const TensorDesc& t : m.tensors) {
    if (!model::is_moe_expert(t.role)) continue;
    per_layer[static_cast<size_t>(t.layer)] += (t.bytes / t.n_expert + 4095) / 4096 * 4096 + 4096;
  }
  EXPECT_EQ(plan.expert_slot_bytes, *std::max_element(per_layer.begin(), per_layer.end()));
}

// Misses are read at storage speed while the routed experts compute: with compute free,
// time per token is the expected miss bytes over the bandwidth (plus request latency);
// with storage free, it is the compute.
TEST(ExpertStreaming, PredictionOverlapsMissesWithExpertCompute) {
  ModelTensors m = synthetic_model(moe_preset_q4km());
  Budgets b;
  b.ram_bytes = 2ull << 30;
  b.n_ctx = 1024;
  HardwareProfile fast_ram = fixture("cpu_24g.json");
  fast_ram.memory.read_bandwidth_bps = 1e15;
  Plan io = must_place(m, fast_ram, b);
  const double miss_s = io.prediction.storage_bytes_per_token / fast_ram.storage.seq_read_bps;
  // Each miss is one read with the 1 MiB QD1 latency beyond the streaming rate.
  const double mib = 1 << 20;
  const double latency = std::max(
      0.0, mib / fast_ram.storage.random_bps(1 << 20, 1) - mib / fast_ram.storage.seq_read_bps);
  EXPECT_GE(io.prediction.seconds_per_token, miss_s);
  EXPECT_LE(io.prediction.seconds_per_token,
            miss_s * 1.1 + io.prediction.expert_misses_per_token * latency + m.n_layer * 25e-6);
  EXPECT_TRUE(io.prediction.io_bound);
  HardwareProfile fast_disk = fixture("cpu_24g.json");
  fast_disk.storage.seq_read_bps = 1e15;
  fast_disk.storage.random.clear();
  Plan cpu = must_place(m, fast_disk, b);
  // A missed expert computes only after its own read, so even a free disk leaves each
  // miss its request latency where no cached expert of the layer hides it (the planner
  // takes 100 us without a measured random-read figure).
  EXPECT_GE(cpu.prediction.seconds_per_token, cpu.prediction.compute_s);
  EXPECT_LE(cpu.prediction.seconds_per_token,
            cpu.prediction.compute_s * 1.02 + cpu.prediction.expert_misses_per_token * 100e-6);
}

// A missed expert computes only after its own read: the layer's other experts hide it,
// never the missed one's own compute. With compute far slower than a read, a layer whose
// routed experts all miss (probability miss^2 for two) still waits for both reads, and
// nothing else stalls (one miss is hidden by the cached expert's compute).
TEST(ExpertStreaming, AMissedExpertWaitsForItsOwnRead) {
  ModelTensors m = synthetic_model(moe_preset_q4km());
  ASSERT_EQ(m.n_expert_used, 2);
  Budgets b;
  b.ram_bytes = 2ull << 30;
  b.n_ctx = 1024;
  HardwareProfile slow_cpu = fixture("cpu_24g.json");
  slow_cpu.cpu.decode.clear();
  slow_cpu.memory.read_bandwidth_bps = 1e9;  // ~25 ms per expert, against ~10 ms per read
  const Plan plan = must_place(m, slow_cpu, b);
  ASSERT_EQ(plan.mode, Mode::kExpertStreaming);
  const Prediction& pr = plan.prediction;
  ASSERT_FALSE(pr.expert_hit_rate_recorded);  // uniform routing: one miss rate for all layers
  const double miss = 1 - pr.expert_hit_rate;
  const double expert_bytes = pr.storage_bytes_per_token / pr.expert_misses_per_token;
  const profiler::StorageProfile& st = slow_cpu.storage;
  const double mib = 1 << 20;
  const double latency = std::max(0.0, mib / st.random_bps(1 << 20, 1) - mib / st.seq_read_bps);
  const double one_read = expert_bytes / st.seq_read_bps + latency;
  ASSERT_GT(pr.compute_s / m.n_layer / 2, one_read) << "the test needs compute to dominate";
  const double both_missed = m.n_layer * miss * miss * 2 * one_read;
  EXPECT_NEAR(pr.seconds_per_token - pr.compute_s, both_missed, both_missed * 1e-6);
}

// Each pool job a token runs pays the CPU's measured per-product cost beside its bytes:
// one per weight matrix, Q/K/V as one job, n_expert_used per stacked expert tensor, none
// for norms or the embedding's row lookup (a model of many small matrices decodes slower
// than its bytes say: the moe synthetic ran 1.11x its bytes-only prediction,
// docs/PLANNER.md).
TEST(CostModel, EveryProductPaysTheMeasuredOverhead) {
  ModelTensors m = synthetic_model(moe_preset_q4km());
  HardwareProfile p = fixture("cpu_24g.json");
  for (const TensorDesc& t : m.tensors) p.cpu.set_decode({t.type, 20e9, 0.0});
  const Plan base = must_place(m, p);
  double products = 0;
  for (const TensorDesc& t : m.tensors) {
    if (model::is_moe_expert(t.role)) {
      products += static_cast<double>(m.n_expert_used);
    } else if (!model::is_norm(t.role) && t.role != model::TensorRole::kTokenEmbedding &&
               t.role != model::TensorRole::kAttnK && t.role != model::TensorRole::kAttnV) {
      products += 1;  // K and V run in Q's job
    }
  }
  ASSERT_GT(products, m.n_layer * 5);
  for (const TensorDesc& t : m.tensors) p.cpu.set_decode({t.type, 20e9, 10e-6});
  const Plan slower = must_place(m, p);
  ASSERT_EQ(slower.mode, Mode::kFullResident);
  EXPECT_NEAR(slower.prediction.compute_s - base.prediction.compute_s, products * 10e-6, 1e-9);
}

// When even the non-expert tensors and a minimal cache do not fit, the planner falls
// back (expert tensors then stream whole, costed as such) or refuses with the numbers.
TEST(ExpertStreaming, FallsBackOnlyWhenTheMinimalCacheDoesNotFit) {
  ModelTensors m = synthetic_model(mixtral_8x7b_q4km());
  Budgets b;
  b.ram_bytes = 1536ull << 20;
  b.n_ctx = 1024;
  auto plan = place(m, fixture("cpu_24g.json"), b);
  if (plan.is_ok()) {
    EXPECT_NE(plan->mode, Mode::kExpertStreaming);
    EXPECT_LE(plan->memory.ram_total(), *b.ram_bytes);
  } else {
    EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  }
}

TEST(Evaluate, ModeFollowsWhatIsOnStorage) {
  ModelTensors m = synthetic_model(mixtral_8x7b_q5km());
  HardwareProfile p = fixture("cpu_24g.json");
  Budgets b;
  auto with = [&](auto pred) {
    Plan plan;
    plan.tiers.assign(m.tensors.size(), Tier::kRam);
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      if (pred(m.tensors[i])) plan.tiers[i] = Tier::kStorage;
    }
    plan.prefetch_depth = 1;
    evaluate(m, p, b, CostModel{}, plan);
    return plan.mode;
  };
  EXPECT_EQ(with([](const TensorDesc&) { return false; }), Mode::kFullResident);
  EXPECT_EQ(with([](const TensorDesc& t) { return model::is_moe_expert(t.role); }),
            Mode::kExpertStreaming);
  EXPECT_EQ(with([](const TensorDesc& t) { return t.role == model::TensorRole::kAttnQ; }),
            Mode::kFullStreaming);
  ModelTensors dense = synthetic_model(llama3_8b_q4km());
  Plan plan;
  plan.tiers.assign(dense.tensors.size(), Tier::kRam);
  for (size_t i = 0; i < dense.tensors.size(); ++i) {
    if (model::is_dense_ffn(dense.tensors[i].role) && dense.tensors[i].layer == 3)
      plan.tiers[i] = Tier::kStorage;
  }
  evaluate(dense, p, b, CostModel{}, plan);
  EXPECT_EQ(plan.mode, Mode::kDenseFfnStreaming);
  EXPECT_EQ(plan.pool_slots, 1u);  // one streamed layer: nothing else to prefetch
}

TEST(Evaluate, StreamingIsBoundedByStorage) {
  // Everything streamed and compute free: time per token is bytes / bandwidth.
  ModelTensors m = synthetic_model(llama3_8b_q4km());
  HardwareProfile p = fixture("cpu_24g.json");
  p.memory.read_bandwidth_bps = 1e15;
  Plan plan;
  plan.tiers.assign(m.tensors.size(), Tier::kRam);
  uint64_t streamed = 0;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    if (model::is_dense_ffn(m.tensors[i].role)) {
      plan.tiers[i] = Tier::kStorage;
      streamed += m.tensors[i].bytes;
    }
  }
  plan.prefetch_depth = 2;
  evaluate(m, p, Budgets{}, CostModel{}, plan);
  EXPECT_EQ(plan.prediction.storage_bytes_per_token, streamed);
  double bound = streamed / p.storage.seq_read_bps;
  EXPECT_NEAR(plan.prediction.seconds_per_token, bound, bound * 0.01);
  EXPECT_TRUE(plan.prediction.io_bound);
}

TEST(Render, TextAndJsonCarryThePlan) {
  ModelTensors m = synthetic_model(llama33_70b_q4km());
  Plan plan = must_place(m, fixture("cpu_24g.json"));
  std::string text = plan_to_text(plan, m);
  EXPECT_NE(text.find("dense-ffn-streaming"), std::string::npos);
  EXPECT_NE(text.find("blk.79"), std::string::npos);
  EXPECT_NE(text.find("Prediction:"), std::string::npos);
  nlohmann::json j = plan_to_json(plan, m, true);
  EXPECT_EQ(j["mode"], "dense-ffn-streaming");
  EXPECT_EQ(j["layers_bytes"].size(), 80u);
  EXPECT_EQ(j["tensors"].size(), m.tensors.size());
  EXPECT_EQ(j["memory"]["ram_total"].get<uint64_t>(), plan.memory.ram_total());
  EXPECT_GT(j["prediction"]["tok_per_s"].get<double>(), 0);
}

}  // namespace
}  // namespace hypura::scheduler

namespace hypura::scheduler {
namespace {

// A real file's directory: roles, expert fractions and a plan with a fixture profile.
TEST(FromGguf, GoldenMixtralGetsRolesAndAPlan) {
  auto file = gguf::GgufFile::open(std::string(HYPURA_GOLDEN_DIR) + "/mixtral-q4_k_m.gguf");
  if (!file.is_ok()) GTEST_SKIP() << file.status().message();
  auto m = model_tensors_from_gguf(*file);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->architecture, "llama");
  EXPECT_GT(m->n_layer, 0);
  EXPECT_GT(m->n_expert, 0);
  EXPECT_EQ(m->total_bytes(), [&] {
    uint64_t t = 0;
    for (const auto& ti : file->tensors()) t += ti.n_bytes;
    return t;
  }());
  int experts = 0;
  for (const auto& t : m->tensors) {
    EXPECT_GE(t.file_index, 0);
    if (model::is_moe_expert(t.role)) {
      ++experts;
      EXPECT_DOUBLE_EQ(t.access_per_token, static_cast<double>(m->n_expert_used) / m->n_expert);
    }
  }
  EXPECT_GT(experts, 0);
  EXPECT_GT(m->kv_elements_per_token, 0u);
  auto plan = place(*m, fixture("cpu_24g.json"), Budgets{});
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->mode, Mode::kFullResident);
}

// Issue 14: a context of 2^62 tokens (a model's context length with -c INT64_MAX) wrapped
// the KV size to a small number, so the plan "fit" and the allocation aborted.
TEST(Limits, HugeContextIsAnErrorNotAWrappedSize) {
  const ModelTensors m = synthetic_model(qwen25_14b_q4km());
  for (int64_t n_ctx : {int64_t{1} << 62, std::numeric_limits<int64_t>::max(), int64_t{1} << 50}) {
    Budgets b;
    b.n_ctx = n_ctx;
    for (auto r : {place(m, fixture("cpu_24g.json"), b),
                   place_layers_in_order(m, fixture("cpu_24g.json"), b)}) {
      ASSERT_FALSE(r.is_ok()) << n_ctx;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(r.status().message().find("is too large"), std::string::npos)
          << r.status().message();
    }
  }
}

// serve's default --parallel: KV caches of n_ctx in a quarter of the memory limit, 1..4.
TEST(DefaultParallel, KvCachesInAQuarterOfTheLimit) {
  const ModelTensors m = synthetic_model(llama3_8b_q4km());  // 128 KiB of F16 KV per token
  const HardwareProfile p = fixture("cpu_24g.json");
  Budgets b;
  b.n_ctx = 4096;  // 512 MiB per sequence
  b.ram_bytes = uint64_t{3} << 30;
  EXPECT_EQ(default_parallel(m, p, b), 1);  // 768 MiB: one cache
  b.ram_bytes = uint64_t{8} << 30;
  EXPECT_EQ(default_parallel(m, p, b), 4);  // 2 GiB: four
  b.n_ctx = 1024;
  b.ram_bytes = uint64_t{1} << 30;
  EXPECT_EQ(default_parallel(m, p, b), 2);  // 256 MiB of 128 MiB caches
  b.ram_bytes = uint64_t{64} << 30;
  EXPECT_EQ(default_parallel(m, p, b), kDefaultMaxParallel);
}

// A plan keeps a KV cache per sequence: four sequences cost three more caches than one.
TEST(DefaultParallel, EverySequenceHasItsKvCache) {
  const ModelTensors m = synthetic_model(llama3_8b_q4km());
  const HardwareProfile p = fixture("cpu_24g.json");
  Budgets one;
  one.n_ctx = 1024;
  Budgets four = one;
  four.n_seq = 4;
  const Plan a = must_place(m, p, one), b = must_place(m, p, four);
  EXPECT_EQ(b.memory.kv_ram, 4 * a.memory.kv_ram);
  EXPECT_EQ(b.n_seq, 4);
}

}  // namespace
}  // namespace hypura::scheduler

namespace hypura::scheduler {
namespace {

// A discrete GPU beside the 24 GiB CPU machine (the H200 under a --vram-budget).
HardwareProfile with_discrete_gpu() {
  HardwareProfile p = fixture("cpu_24g.json");
  profiler::GpuProfile g;
  g.name = "test GPU";
  g.total_bytes = g.free_bytes = uint64_t{140} << 30;
  g.memory_bandwidth_bps = 4e12;
  p.gpus.push_back(g);
  return p;
}

Budgets gpu_budget(uint64_t bytes) {
  Budgets b;
  b.gpu_bytes = bytes;
  b.n_ctx = 4096;
  return b;
}

// What each tensor's tier must be for the split the plan reports: the head and the last
// `layers` layers on the GPU, nothing of them on storage, the rest off the GPU.
void expect_suffix_split(const ModelTensors& m, const Plan& plan) {
  const int first = m.n_layer - plan.gpu.layers;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorDesc& t = m.tensors[i];
    const bool want_gpu = (t.layer >= first) ||
                          (plan.gpu.head && (t.role == model::TensorRole::kOutput ||
                                             t.role == model::TensorRole::kOutputNorm)) ||
                          (t.role == model::TensorRole::kTokenEmbedding && plan.gpu.embedding);
    EXPECT_EQ(plan.tiers[i] == Tier::kGpu, want_gpu)
        << t.name << " with " << plan.gpu.layers << " GPU layers";
  }
}

// serve's default --parallel with the whole model in VRAM: KV caches in half of what the
// plan leaves free, up to kGpuMaxParallel; a CPU plan or a split keeps its own figure.
TEST(DiscreteGpu, ParallelSequencesFromFreeVram) {
  const ModelTensors m = synthetic_model(llama3_8b_q4km());  // 512 MiB of KV at 4096
  const HardwareProfile p = with_discrete_gpu();
  const Plan roomy = must_place(m, p, gpu_budget(uint64_t{40} << 30));
  ASSERT_EQ(roomy.gpu.layers, m.n_layer);
  EXPECT_EQ(gpu_parallel(m, roomy), kGpuMaxParallel);
  const Plan tight = must_place(m, p, gpu_budget(uint64_t{7} << 30));
  ASSERT_EQ(tight.gpu.layers, m.n_layer);
  const int n = gpu_parallel(m, tight);
  const uint64_t kv_one = tight.memory.kv_gpu,
                 free = tight.memory.gpu_limit - tight.memory.gpu_total();
  EXPECT_EQ(static_cast<uint64_t>(n), 1 + free / 2 / kv_one);
  EXPECT_GT(n, 1);
  EXPECT_LT(n, kGpuMaxParallel);
  Budgets wider = gpu_budget(uint64_t{7} << 30);
  wider.n_seq = n;
  const Plan with_caches = must_place(m, p, wider);
  EXPECT_EQ(with_caches.gpu.layers, m.n_layer);  // the caches fit beside every layer
  EXPECT_EQ(with_caches.memory.kv_gpu, static_cast<uint64_t>(n) * kv_one);
  const Plan split = must_place(m, p, gpu_budget(uint64_t{2} << 30));
  ASSERT_LT(split.gpu.layers, m.n_layer);
  EXPECT_EQ(gpu_parallel(m, split), split.n_seq);
  EXPECT_EQ(gpu_parallel(m, must_place(m, fixture("cpu_24g.json"), gpu_budget(0))), 1);
}

// More VRAM puts more of the last layers on the GPU, never more than fits, and predicts a
// faster token; all of the 8b fits in 8 GiB, embedding included.
TEST(DiscreteGpu, BudgetDecidesASuffixOfLayers) {
  const ModelTensors m = synthetic_model(llama3_8b_q4km());
  const HardwareProfile p = with_discrete_gpu();
  int last_layers = -1;
  double last_tok_s = 0;
  for (uint64_t mib : {256, 1024, 2048, 3072, 8192}) {
    const Plan plan = must_place(m, p, gpu_budget(uint64_t{mib} << 20));
    expect_suffix_split(m, plan);
    EXPECT_LE(plan.memory.gpu_total(), uint64_t{mib} << 20) << mib;
    EXPECT_GE(plan.gpu.layers, last_layers) << mib;
    EXPECT_GE(plan.prediction.tok_per_s, last_tok_s * (1 - 1e-9)) << mib;
    // The RAM holds the CPU's share only.
    EXPECT_EQ(plan.memory.ram_weights + plan.memory.gpu_weights, m.total_bytes()) << mib;
    last_layers = plan.gpu.layers;
    last_tok_s = plan.prediction.tok_per_s;
  }
  EXPECT_FALSE(
      must_place(m, p, gpu_budget(uint64_t{256} << 20)).gpu.any());  // below the CUDA context
  const Plan part = must_place(m, p, gpu_budget(uint64_t{2048} << 20));
  EXPECT_TRUE(part.gpu.head);
  EXPECT_GT(part.gpu.layers, 0);
  EXPECT_LT(part.gpu.layers, m.n_layer);
  EXPECT_GT(part.memory.kv_gpu, 0u);
  EXPECT_GT(part.memory.kv_ram, 0u);
  const Plan all = must_place(m, p, gpu_budget(uint64_t{8192} << 20));
  EXPECT_EQ(all.gpu.layers, m.n_layer);
  EXPECT_TRUE(all.gpu.embedding);
  EXPECT_EQ(all.memory.ram_weights, 0u);
}

// Multi-head latent attention (Kimi-K2's shape, deepseek2): the KV cache the GPU tier holds
// is one row of kv_lora_rank + qk_rope values per layer and position (model::KvCache), not
// K and V of every head.
TEST(DiscreteGpu, LatentKvCacheSizedAsTheLatent) {
  const ModelTensors m = synthetic_model(kimi_k2_q4km());
  EXPECT_EQ(m.kv_elements_per_token, uint64_t{61} * (512 + 64));
  const Budgets b = gpu_budget(uint64_t{128} << 30);
  const Plan plan = must_place(m, with_discrete_gpu(), b);
  ASSERT_TRUE(plan.gpu.any());
  EXPECT_GT(plan.memory.kv_gpu, 0u);
  EXPECT_EQ(plan.memory.kv_gpu + plan.memory.kv_ram, uint64_t{61} * 576 * 2 * 4096);
}

// Under a RAM budget too small for the CPU's share, the CPU's layers stream; the GPU's
// never do.
TEST(DiscreteGpu, CpuLayersStreamUnderARamBudget) {
  const ModelTensors m = synthetic_model(llama3_8b_q4km());
  Budgets b = gpu_budget(uint64_t{2048} << 20);
  b.ram_bytes = uint64_t{2} << 30;
  const Plan plan = must_place(m, with_discrete_gpu(), b);
  expect_suffix_split(m, plan);
  EXPECT_GT(plan.gpu.layers, 0);
  EXPECT_GT(plan.prediction.storage_bytes_per_token, 0u);
  EXPECT_LE(plan.memory.ram_total(), b.ram_bytes.value());
}

// A tied head: the embedding stays in RAM for the CPU's first layer and a copy on the GPU
// multiplies the logits, counted on both sides.
TEST(DiscreteGpu, TiedHeadIsCopiedToTheGpu) {
  ShapeSpec s = llama3_8b_q4km();
  s.tied_embeddings = true;
  const ModelTensors m = synthetic_model(s);
  const Plan plan = must_place(m, with_discrete_gpu(), gpu_budget(uint64_t{2048} << 20));
  ASSERT_TRUE(plan.gpu.head);
  ASSERT_LT(plan.gpu.layers, m.n_layer);
  EXPECT_TRUE(plan.gpu.tied_head_copy);
  uint64_t embd = 0;
  for (const TensorDesc& t : m.tensors)
    embd += t.role == model::TensorRole::kTokenEmbedding ? t.bytes : 0;
  EXPECT_EQ(plan.memory.ram_weights + plan.memory.gpu_weights, m.total_bytes() + embd);
}

}  // namespace
}  // namespace hypura::scheduler

namespace hypura::scheduler {
namespace {

// --gpu-layers caps the suffix (the head still goes to the GPU); 0 leaves only the head.
TEST(DiscreteGpu, GpuLayersCapsTheSuffix) {
  const ModelTensors m = synthetic_model(llama3_8b_q4km());
  for (int cap : {0, 8, 24}) {
    Budgets b = gpu_budget(uint64_t{64} << 30);
    b.max_gpu_layers = cap;
    const Plan plan = must_place(m, with_discrete_gpu(), b);
    EXPECT_EQ(plan.gpu.layers, cap);
    EXPECT_TRUE(plan.gpu.head);
    expect_suffix_split(m, plan);
  }
}

}  // namespace
}  // namespace hypura::scheduler

namespace hypura::scheduler {
namespace {

// A token's traffic by tier adds up to what it reads; a split moves the residual rows
// and the logits over the bus, and a prompt batch the CPU's layers.
TEST(DiscreteGpu, TrafficPerTierAddsUp) {
  const ModelTensors m = synthetic_model(llama3_8b_q4km());
  Budgets b = gpu_budget(uint64_t{64} << 30);
  b.max_gpu_layers = 16;
  const Plan plan = must_place(m, with_discrete_gpu(), b);
  const TierTraffic t = tier_traffic(m, plan);
  // Each tensor's share is rounded down on its own.
  EXPECT_NEAR(static_cast<double>(t.gpu_bytes + t.ram_bytes + t.storage_bytes),
              static_cast<double>(m.bytes_read_per_token()), static_cast<double>(m.tensors.size()));
  EXPECT_GT(t.gpu_bytes, 0u);
  EXPECT_GT(t.ram_bytes, 0u);
  EXPECT_EQ(t.bus_bytes_per_token, 4 * static_cast<uint64_t>(m.n_vocab + m.n_embd));
  uint64_t host_layers = 0;
  for (const TensorDesc& d : m.tensors)
    host_layers += d.layer >= 0 && d.layer < m.n_layer - 16 ? d.bytes : 0;
  EXPECT_EQ(t.prompt_bus_bytes, host_layers);
  const TierTraffic cpu = tier_traffic(m, must_place(m, fixture("cpu_24g.json")));
  EXPECT_EQ(cpu.bus_bytes_per_token, 0u);
  EXPECT_EQ(cpu.gpu_bytes, 0u);
}

}  // namespace
}  // namespace hypura::scheduler

namespace hypura::scheduler {
namespace {

// The bound of a token's traffic: bytes over each tier's bandwidth, the stages in series,
// storage reads under them; an unknown rate for bytes that move leaves it unknown.
TEST(DiscreteGpu, TrafficBoundTimesEachTier) {
  TierTraffic t;
  t.gpu_bytes = 2'000'000'000;
  t.ram_bytes = 1'000'000'000;
  t.bus_bytes_per_token = 1'000'000;
  const TrafficRates r{.gpu_bps = 4e12, .ram_bps = 100e9, .storage_bps = 5e9, .bus_bps = 50e9};
  TrafficBound b = traffic_bound(t, r);
  EXPECT_DOUBLE_EQ(b.gpu_s, 0.0005);
  EXPECT_DOUBLE_EQ(b.ram_s, 0.01);
  EXPECT_DOUBLE_EQ(b.bus_s, 0.00002);
  EXPECT_DOUBLE_EQ(b.storage_s, 0);
  EXPECT_DOUBLE_EQ(b.seconds, 0.01052);
  EXPECT_DOUBLE_EQ(b.tok_s, 1 / 0.01052);
  EXPECT_EQ(b.limit, "ram");
  // Streamed weights: read from storage (prefetched) and computed from RAM.
  t.storage_bytes = 1'000'000'000;
  b = traffic_bound(t, r);
  EXPECT_DOUBLE_EQ(b.ram_s, 0.02);
  EXPECT_DOUBLE_EQ(b.storage_s, 0.2);
  EXPECT_DOUBLE_EQ(b.seconds, 0.2);
  EXPECT_EQ(b.limit, "storage");
  // No GPU rate: unknown while the GPU reads bytes, fine without them.
  TrafficRates no_gpu = r;
  no_gpu.gpu_bps = 0;
  b = traffic_bound(t, no_gpu);
  EXPECT_EQ(b.tok_s, 0);
  EXPECT_EQ(b.limit, "unknown");
  t.gpu_bytes = 0;
  t.bus_bytes_per_token = 0;
  t.storage_bytes = 0;
  b = traffic_bound(t, no_gpu);
  EXPECT_DOUBLE_EQ(b.tok_s, 100);
  EXPECT_EQ(b.limit, "ram");
}

// The bound of a real split's plan: the CPU's 16 layers dominate the 8b at 16 GPU layers.
TEST(DiscreteGpu, TrafficBoundOfASplit) {
  const ModelTensors m = synthetic_model(llama3_8b_q4km());
  Budgets b = gpu_budget(uint64_t{64} << 30);
  b.max_gpu_layers = 16;
  const Plan plan = must_place(m, with_discrete_gpu(), b);
  const TrafficBound tb =
      traffic_bound(tier_traffic(m, plan), {.gpu_bps = 4e12, .ram_bps = 100e9, .bus_bps = 50e9});
  EXPECT_EQ(tb.limit, "ram");
  EXPECT_GT(tb.ram_s, 10 * tb.gpu_s);
  EXPECT_NEAR(tb.seconds, tb.ram_s + tb.gpu_s + tb.bus_s, 1e-12);
}

}  // namespace
}  // namespace hypura::scheduler

namespace hypura::scheduler {
namespace {

// A MoE model that does not fit the GPU whole: every layer's attention, router and KV
// cache go to the GPU and the routed experts of a prefix of layers stay in RAM (the
// expert split); more VRAM moves more layers' experts up, the prediction never gets
// slower, and --gpu-layers still asks for whole layers.
TEST(DiscreteGpu, MoeSplitsItsExpertsFirst) {
  const ModelTensors m = synthetic_model(mixtral_8x7b_q5km());
  HardwareProfile p = with_discrete_gpu();
  p.memory.total_bytes = p.memory.effective_limit_bytes = uint64_t{128} << 30;
  p.memory.cgroup_limit_bytes.reset();
  int last_host = m.n_layer + 1;
  double last_tok_s = 0;
  for (uint64_t gib_budget : {4, 8, 16}) {
    const Budgets b = gpu_budget(gib_budget << 30);
    const Plan plan = must_place(m, p, b);
    EXPECT_EQ(plan.gpu.layers, m.n_layer) << gib_budget;
    EXPECT_GT(plan.gpu.host_experts, 0) << gib_budget;
    EXPECT_LT(plan.gpu.host_experts, last_host) << gib_budget;
    EXPECT_EQ(plan.mode, Mode::kFullResident) << gib_budget;
    EXPECT_LE(plan.memory.gpu_total(), gib_budget << 30) << gib_budget;
    EXPECT_GE(plan.prediction.tok_per_s, last_tok_s) << gib_budget;
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      const TensorDesc& t = m.tensors[i];
      const bool host_expert = model::is_moe_expert(t.role) && t.layer < plan.gpu.host_experts;
      if (t.role == model::TensorRole::kTokenEmbedding) continue;
      EXPECT_EQ(plan.tiers[i] == Tier::kGpu, !host_expert) << t.name << " at " << gib_budget;
    }
    // Decode carries each host-expert layer's rows down and n_used outputs up.
    const TierTraffic traffic = tier_traffic(m, plan);
    EXPECT_EQ(traffic.bus_bytes_per_token,
              4 * static_cast<uint64_t>(m.n_vocab) +
                  static_cast<uint64_t>(plan.gpu.host_experts) * 4 *
                      static_cast<uint64_t>(m.n_embd * (1 + m.n_expert_used)));
    last_host = plan.gpu.host_experts;
    last_tok_s = plan.prediction.tok_per_s;
  }
  // --cpu-moe-layers: at least that many layers' experts in RAM, even when more would fit.
  Budgets asked = gpu_budget(uint64_t{64} << 30);
  asked.min_host_expert_layers = 20;
  const Plan forced = must_place(m, p, asked);
  EXPECT_EQ(forced.gpu.layers, m.n_layer);
  EXPECT_EQ(forced.gpu.host_experts, 20);
  Budgets whole = gpu_budget(uint64_t{16} << 30);
  whole.max_gpu_layers = 8;
  const Plan layers = must_place(m, p, whole);
  EXPECT_EQ(layers.gpu.layers, 8);
  EXPECT_EQ(layers.gpu.host_experts, 0);
  // Under a RAM budget too small for the host experts they stream from storage into the
  // expert cache (the host thread reads the routed ones), when that beats whole layers on
  // the GPU with the CPU streaming the rest of each layer.
  Budgets tight = gpu_budget(uint64_t{8} << 30);
  tight.ram_bytes = uint64_t{12} << 30;
  const Plan streamed = must_place(m, p, tight);
  EXPECT_EQ(streamed.gpu.layers, m.n_layer);
  EXPECT_GT(streamed.gpu.host_experts, 0);
  EXPECT_EQ(streamed.mode, Mode::kExpertStreaming);
  EXPECT_LE(streamed.memory.ram_total(), tight.ram_bytes.value());
  EXPECT_GT(streamed.expert_cache_experts, 0u);
  Budgets whole_layers = tight;
  whole_layers.max_gpu_layers = m.n_layer;  // --gpu-layers: whole layers only
  const Plan by_layers = must_place(m, p, whole_layers);
  EXPECT_EQ(by_layers.gpu.host_experts, 0);
  EXPECT_LT(by_layers.gpu.layers, m.n_layer);
  expect_suffix_split(m, by_layers);
  EXPECT_GT(streamed.prediction.tok_per_s, by_layers.prediction.tok_per_s);
}

// A leading dense layer (glm4moe, deepseek2) has no experts: host_experts spans it, up to
// the last layer whose experts are the host's, as the runtime takes the first host_experts
// layers; the bus carries rows only for the layers with experts.
TEST(DiscreteGpu, ExpertSplitSpansLeadingDenseLayers) {
  ModelTensors m;
  m.n_layer = 3;
  m.n_embd = 8;
  m.n_vocab = 10;
  m.n_expert = 4;
  m.n_expert_used = 2;
  std::vector<Tier> tiers;
  const auto add = [&](int layer, model::TensorRole role, Tier tier) {
    TensorDesc t;
    t.layer = layer;
    t.role = role;
    t.bytes = 1024;
    m.tensors.push_back(t);
    tiers.push_back(tier);
  };
  add(-1, model::TensorRole::kOutputNorm, Tier::kGpu);
  add(-1, model::TensorRole::kTokenEmbedding, Tier::kGpu);
  for (int L = 0; L < 3; ++L) {
    add(L, model::TensorRole::kAttnQ, Tier::kGpu);
    if (L == 0) {
      add(L, model::TensorRole::kFfnUp, Tier::kGpu);  // the dense lead layer
      continue;
    }
    add(L, model::TensorRole::kMoeUpExperts, L == 1 ? Tier::kRam : Tier::kGpu);
  }
  const GpuSplit g = gpu_split_of(m, tiers);
  EXPECT_EQ(g.layers, 3);
  EXPECT_EQ(g.host_experts, 2);  // layers 0 (dense) and 1
  Plan plan;
  plan.tiers = tiers;
  plan.gpu = g;
  EXPECT_EQ(tier_traffic(m, plan).bus_bytes_per_token,
            4 * static_cast<uint64_t>(m.n_vocab) + 4 * static_cast<uint64_t>(m.n_embd * 3));
}

// Whatever the RAM budget, the plan place() picks is never predicted slower than whole
// layers on the GPU (the alternative it weighs a streamed expert split against).
TEST(DiscreteGpu, StreamedExpertSplitOnlyWhenFaster) {
  const ModelTensors m = synthetic_model(mixtral_8x7b_q5km());
  HardwareProfile p = with_discrete_gpu();
  p.memory.total_bytes = p.memory.effective_limit_bytes = uint64_t{128} << 30;
  p.memory.cgroup_limit_bytes.reset();
  for (uint64_t ram_gib : {6, 12, 20}) {
    Budgets b = gpu_budget(uint64_t{8} << 30);
    b.ram_bytes = ram_gib << 30;
    const Plan chosen = must_place(m, p, b);
    Budgets layers_only = b;
    layers_only.max_gpu_layers = m.n_layer;
    const Result<Plan> layers = place(m, p, layers_only);
    if (layers.is_ok()) {
      EXPECT_GE(chosen.prediction.tok_per_s, layers->prediction.tok_per_s) << ram_gib;
    }
  }
}

}  // namespace
}  // namespace hypura::scheduler
