// place(): for each prefetch depth, the least streaming that fits, by streaming class
// (experts, dense FFN, attention, the output head), with the resident rest split between
// GPU and RAM; the whole-layers-in-order placement competes too (docs/PLANNER.md,
// "Algorithm").
#include <map>
#include <utility>

#include "scheduler/planner_internal.h"

namespace hypura::scheduler {
namespace detail {
namespace {

using model::TensorRole;

// Streaming classes, streamed in this order (docs/PLANNER.md: ratio of I/O added per
// byte of memory freed, lowest first).
enum class StreamClass { kNever = 0, kExperts = 1, kDenseFfn = 2, kAttention = 3, kOutputHead = 4 };

StreamClass stream_class(const TensorDesc& t) {
  if (model::is_moe_expert(t.role)) return StreamClass::kExperts;
  if (model::is_dense_ffn(t.role) || t.role == TensorRole::kSharedExpert) {
    // Matrices of any size (small models' FFN matrices are small); shared-expert gates are
    // vectors, read every token and too small to free anything.
    return t.row_bytes > 0 && t.row_bytes < t.bytes ? StreamClass::kDenseFfn : StreamClass::kNever;
  }
  switch (t.role) {
    case TensorRole::kAttnQ:
    case TensorRole::kAttnK:
    case TensorRole::kAttnV:
    case TensorRole::kAttnQkv:
    case TensorRole::kAttnOutput:
      return StreamClass::kAttention;
    case TensorRole::kOutput:
      // Its own class, streamed last: it is one group as large as several layers, so
      // streaming it makes every pool slot that large.
      return StreamClass::kOutputHead;
    case TensorRole::kTokenEmbedding:
      // The runtime keeps the token embedding resident (a pass needs rows it cannot know
      // before the pass; a tied one is the output head too), and the plan is what runs.
      return StreamClass::kNever;
    case TensorRole::kOther:
      return t.bytes >= (uint64_t{16} << 20) ? StreamClass::kAttention : StreamClass::kNever;
    default:
      return StreamClass::kNever;  // norms, biases, router, rope factors: small, always hot
  }
}

// k of n items spread evenly (streamed layers interleaved with resident ones keep the
// device busy while resident layers compute; a block of them would leave it idle).
std::vector<int> spread(int k, int n) {
  std::vector<int> out;
  for (int i = 0; i < k; ++i)
    out.push_back(static_cast<int>((2 * static_cast<int64_t>(i) + 1) * n / (2 * k)));
  return out;
}

// Tiers with the given tensors streamed and the rest resident, split between GPU and RAM.
std::vector<Tier> with_streamed(const ModelTensors& m, const std::vector<bool>& streamed,
                                const Budgets& b, const CostModel& c, const Limits& lim) {
  std::vector<Tier> tiers(m.tensors.size(), Tier::kRam);
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (streamed[i]) tiers[i] = Tier::kStorage;
  }
  if (!lim.gpu_fixed.empty()) {
    for (size_t i = 0; i < tiers.size(); ++i) {
      if (lim.gpu_fixed[i]) tiers[i] = Tier::kGpu;
    }
    return tiers;
  }
  assign_gpu(m, b, c, lim, tiers);
  return tiers;
}

// Groups of one class: the tensors of that class in each pipeline layer, in layer order
// (a discrete GPU's tensors are in none: they never stream).
std::vector<std::vector<size_t>> class_groups(const ModelTensors& m, StreamClass cls,
                                              const Limits& lim) {
  std::map<int, std::vector<size_t>> by_layer;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    if (!lim.gpu_fixed.empty() && lim.gpu_fixed[i]) continue;
    if (stream_class(m.tensors[i]) == cls) by_layer[pipeline_layer(m, m.tensors[i])].push_back(i);
  }
  std::vector<std::vector<size_t>> out;
  for (auto& [layer, idx] : by_layer) out.push_back(idx);
  return out;
}

struct Candidate {
  bool found = false;
  Plan plan;
};

// Extra streaming must buy at least kMinGain: between near-equal plans the simpler one
// (fewer classes on storage, a purer mode) wins. The cost model is not more accurate
// than this, so the choice costs nothing measurable.
constexpr double kMinGain = 0.05;

// Strictly faster, beyond rounding.
bool faster(const Plan& a, const Plan& b) {
  return a.prediction.seconds_per_token < b.prediction.seconds_per_token * (1 - 1e-9);
}

struct Search {
  const ModelTensors& m;
  const profiler::HardwareProfile& p;
  const Budgets& b;
  const CostModel& c;
  const Limits& lim;
  int depth;

  // Evaluates `streamed`; true (and the plan in `out`) when it fits.
  bool attempt(const std::vector<bool>& streamed, Plan& out) const {
    out = Plan{};
    out.tiers = with_streamed(m, streamed, b, c, lim);
    out.prefetch_depth = depth;
    return evaluate(m, p, b, c, out);
  }

  // `base` plus k groups of `groups`, spread over the layers.
  static std::vector<bool> plus(std::vector<bool> base,
                                const std::vector<std::vector<size_t>>& groups, int k) {
    for (int g : spread(k, static_cast<int>(groups.size()))) {
      for (size_t i : groups[static_cast<size_t>(g)]) base[i] = true;
    }
    return base;
  }

  // The (dense FFN groups, attention groups) frontier on top of `base`: for each number of
  // FFN groups the fewest attention groups that fit (a count whose maximum does not fit
  // is skipped after one evaluation). Pure-FFN plans win unless a mixed one is kMinGain
  // faster.
  void frontier(const std::vector<bool>& base, Candidate& best) const {
    auto ffn = class_groups(m, StreamClass::kDenseFfn, lim);
    auto attn = class_groups(m, StreamClass::kAttention, lim);
    Candidate pure, mixed;
    int n2 = static_cast<int>(ffn.size()), n3 = static_cast<int>(attn.size());
    auto consider = [&](const std::vector<bool>& streamed, bool is_pure) {
      Plan plan;
      if (!attempt(streamed, plan)) return false;
      Candidate& slot = is_pure ? pure : mixed;
      if (!slot.found || faster(plan, slot.plan)) {
        slot.found = true;
        slot.plan = std::move(plan);
      }
      return true;
    };
    Plan probe;
    for (int k2 = 0; k2 <= n2; ++k2) {
      std::vector<bool> with_ffn = plus(base, ffn, k2);
      if (n3 > 0 && !attempt(plus(with_ffn, attn, n3), probe)) continue;
      for (int k3 = 0; k3 <= n3; ++k3) {
        if (consider(plus(with_ffn, attn, k3), k3 == 0)) break;
      }
      if (pure.found) break;  // more FFN streaming only adds reads
    }
    for (Candidate* cand : {&pure, &mixed}) {
      if (!cand->found) continue;
      double bar = best.found ? best.plan.prediction.seconds_per_token * (1 - kMinGain) : 1e300;
      if (cand->plan.prediction.seconds_per_token < bar) best = std::move(*cand);
    }
  }

  // The least streaming that fits at this depth: nothing; else every expert tensor (expert
  // streaming: the cache then holds any fraction of them); else the best dense frontier
  // with or without the expert tensors streamed; else everything streamable.
  Candidate run() const {
    std::vector<bool> none(m.tensors.size(), false);
    Candidate best;
    if (attempt(none, best.plan)) {
      best.found = true;
      return best;
    }
    auto experts = class_groups(m, StreamClass::kExperts, lim);
    if (!experts.empty()) {
      // Expert streaming whenever it fits: the cache takes whatever memory is left, which
      // serves any routing better than pinning whole layers, and the runtime's expert
      // provider reads single experts only in this mode.
      std::vector<bool> base = plus(none, experts, static_cast<int>(experts.size()));
      if (attempt(base, best.plan)) {
        best.found = true;
        return best;
      }
      // Expert tensors streamed whole with the dense frontier (full-streaming), or kept
      // resident while the dense frontier streams, whichever is faster.
      frontier(base, best);
    }
    frontier(none, best);
    if (best.found) return best;
    // The output head streamed too, on top of either base (its slot size makes it last).
    if (auto head = class_groups(m, StreamClass::kOutputHead, lim); !head.empty()) {
      const int n_head = static_cast<int>(head.size());
      if (!experts.empty())
        frontier(plus(plus(none, experts, static_cast<int>(experts.size())), head, n_head), best);
      frontier(plus(none, head, n_head), best);
      if (best.found) return best;
    }
    std::vector<bool> all(m.tensors.size(), false);
    for (size_t i = 0; i < all.size(); ++i)
      all[i] = stream_class(m.tensors[i]) != StreamClass::kNever;
    if (attempt(all, best.plan)) best.found = true;
    return best;
  }
};

// The best class-ordered placement over the prefetch depths.
Candidate best_over_depths(const ModelTensors& m, const profiler::HardwareProfile& p,
                           const Budgets& b, const CostModel& c, const Limits& lim) {
  Candidate best;
  int worse = 0;
  for (int depth = 1; depth <= c.max_prefetch_depth; ++depth) {
    Candidate cand = Search{m, p, b, c, lim, depth}.run();
    if (!cand.found) continue;
    // Strictly better only: ties keep the shallower depth (less memory, same speed).
    if (!best.found || faster(cand.plan, best.plan)) {
      best = std::move(cand);
      worse = 0;
    } else if (++worse == 2) {
      break;  // deeper prefetch only costs more memory from here on
    }
    if (best.plan.pool_slots == 0) break;  // nothing dense streams: depth is irrelevant
  }
  return best;
}

// The error when nothing fits, with the figures of streaming every streamable tensor.
Status no_fit_error(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b,
                    const CostModel& c, const Limits& lim) {
  Plan probe;
  probe.tiers.assign(m.tensors.size(), Tier::kStorage);
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    if (stream_class(m.tensors[i]) == StreamClass::kNever) probe.tiers[i] = Tier::kRam;
  }
  probe.prefetch_depth = 1;
  evaluate(m, p, b, c, probe);
  return resource_exhausted(
      "no placement fits: even streaming every large tensor needs " +
      gib(probe.memory.ram_total()) + " of host memory (KV cache " + gib(probe.memory.kv_ram) +
      ", work buffers " + gib(probe.memory.work_ram) + ", pool " + gib(probe.memory.pool) +
      "), over the limit of " + gib(lim.ram) + " (" + host_limit_source(p, b, lim) +
      "); lower --context or raise the budget");
}

// Whole layers resident in order, the rest streamed: for each depth the most resident
// layers that fit, the fastest depth.
Result<Plan> layers_in_order(const ModelTensors& m, const profiler::HardwareProfile& p,
                             const Budgets& b, const CostModel& c, const Limits& lim) {
  Plan best;
  bool found = false;
  for (int depth = 1; depth <= c.max_prefetch_depth; ++depth) {
    for (int resident = m.n_layer; resident >= 0; --resident) {
      std::vector<bool> streamed(m.tensors.size(), false);
      for (size_t i = 0; i < m.tensors.size(); ++i) {
        const TensorDesc& t = m.tensors[i];
        streamed[i] = t.layer >= resident && stream_class(t) != StreamClass::kNever;
      }
      Plan plan;
      plan.tiers = with_streamed(m, streamed, b, c, lim);
      plan.prefetch_depth = depth;
      if (!evaluate(m, p, b, c, plan)) continue;
      if (!found || plan.prediction.seconds_per_token < best.prediction.seconds_per_token)
        best = plan;
      found = true;
      break;
    }
  }
  if (!found) return resource_exhausted("layers-in-order placement does not fit");
  return best;
}

// place() within the limits (and the GPU's tensors) of `lim`.
Result<Plan> place_within(const ModelTensors& m, const profiler::HardwareProfile& p,
                          const Budgets& b, const CostModel& c, const Limits& lim) {
  Candidate best = best_over_depths(m, p, b, c, lim);
  if (!best.found) return no_fit_error(m, p, b, c, lim);
  // The layer-prefix placement (whole layers resident in order) is a candidate too: the
  // class order above is within one group of the best for dense models, but for MoE
  // models a whole resident layer can beat spreading the cache (docs/PLANNER.md).
  // Not for expert streaming: there the cache already holds what whole layers would.
  auto prefix = best.plan.mode == Mode::kExpertStreaming
                    ? Result<Plan>(resource_exhausted("expert streaming"))
                    : layers_in_order(m, p, b, c, lim);
  bool prefix_won = prefix.is_ok() && faster(*prefix, best.plan);
  if (prefix_won) best.plan = std::move(prefix).value();
  explain(m, p, b, c, lim, best.plan);
  if (prefix_won) {
    best.plan.explanation.push_back(
        "Chosen over the class-ordered placement: keeping whole layers resident in "
        "order predicts a faster token here.");
  }
  return std::move(best.plan);
}

}  // namespace
}  // namespace detail

Result<Plan> place(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b,
                   const CostModel& c) {
  using namespace detail;
  if (m.tensors.empty() || m.n_layer <= 0)
    return invalid_argument("model has no tensors or layers to place");
  if (p.storage.seq_read_bps <= 0) return invalid_argument("profile has no storage read bandwidth");
  HYPURA_RETURN_IF_ERROR(check_context_sizes(m, b));
  Result<Plan> plan = place_within(m, p, b, c, limits_for(m, p, b, c));
  // An expert split whose host experts do not fit in RAM streams them from storage into
  // the expert cache; whole layers on the GPU (the rest streamed by the CPU) may still be
  // faster, so the faster prediction wins unless --cpu-moe-layers asked for the split.
  if (plan.is_ok() && plan->gpu.host_experts > 0 && plan->mode != Mode::kFullResident &&
      b.min_host_expert_layers <= 0) {
    Result<Plan> layers = place_within(m, p, b, c, limits_for(m, p, b, c, /*expert_split=*/false));
    if (layers.is_ok() && layers->prediction.tok_per_s > plan->prediction.tok_per_s)
      plan = std::move(layers);
  }
  return plan;
}

Result<Plan> place_layers_in_order(const ModelTensors& m, const profiler::HardwareProfile& p,
                                   const Budgets& b, const CostModel& c) {
  HYPURA_RETURN_IF_ERROR(detail::check_context_sizes(m, b));
  return detail::layers_in_order(m, p, b, c, detail::limits_for(m, p, b, c));
}

}  // namespace hypura::scheduler
