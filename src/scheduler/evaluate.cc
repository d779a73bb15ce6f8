// evaluate(): the memory a placement needs and the speed it predicts, in phases: each
// tensor's compute and memory, the fixed costs (KV cache, GPU buffers, the split's), the
// dense streaming pool, the expert cache, then the prediction (docs/PLANNER.md).
#include <algorithm>
#include <numeric>

#include "scheduler/planner_internal.h"

namespace hypura::scheduler {
namespace detail {

int pipeline_layer(const ModelTensors& m, const TensorDesc& t) {
  if (t.layer >= 0) return std::min(t.layer, m.n_layer - 1);
  return t.role == model::TensorRole::kTokenEmbedding ? 0 : m.n_layer;
}

Mode derive_mode(const ModelTensors& m, const std::vector<Tier>& tiers) {
  bool any = false, only_experts = true, only_dense = true;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] != Tier::kStorage) continue;
    any = true;
    only_experts &= model::is_moe_expert(m.tensors[i].role);
    only_dense &= model::is_dense_ffn(m.tensors[i].role);
  }
  if (!any) return Mode::kFullResident;
  if (only_experts) return Mode::kExpertStreaming;
  if (only_dense) return Mode::kDenseFfnStreaming;
  return Mode::kFullStreaming;
}

namespace {

// What the tensors contribute, per pipeline layer (index n_layer is the output head).
struct Tally {
  LayerCosts lc;
  std::vector<uint64_t> streamed_bytes;                          // dense-streamed bytes
  std::vector<std::vector<const TensorDesc*>> streamed_tensors;  // dense-streamed tensors
  std::vector<uint64_t> expert_bytes;    // one expert's gate+up+down (expert-streaming)
  std::vector<uint64_t> expert_slot;     // the same in an ExpertProvider slot
  std::vector<double> expert_compute_s;  // the routed experts' compute
  std::vector<bool> kv_gpu;              // the layer's attention computes on the GPU
  uint64_t expert_total_bytes = 0;       // expert tensors the cache serves
  bool any_gpu = false;

  Tally(size_t n_pipe, double per_layer_overhead_s)
      : lc{std::vector<double>(n_pipe, per_layer_overhead_s), std::vector<double>(n_pipe, 0.0),
           std::vector<double>(n_pipe, 0.0), std::vector<double>(n_pipe, 0.0)},
        streamed_bytes(n_pipe, 0),
        streamed_tensors(n_pipe),
        expert_bytes(n_pipe, 0),
        expert_slot(n_pipe, 0),
        expert_compute_s(n_pipe, 0.0),
        kv_gpu(n_pipe, false) {}
};

// Each tensor's compute on the tier it computes on, and its bytes in the memory of its
// tier or among the streamed ones (single experts through the cache, or dense reads).
Tally tally_tensors(const ModelTensors& m, const profiler::HardwareProfile& p, const CostModel& c,
                    const Limits& lim, const Plan& plan, MemoryPlan& mem) {
  Tally tally(static_cast<size_t>(m.n_layer) + 1, c.per_layer_overhead_s);
  // Only expert-streaming mode reads single experts through the cache (ExpertProvider); in
  // the other modes the streaming provider reads a streamed expert tensor whole, so it is
  // costed as a dense streamed tensor (all n_expert experts per token).
  const bool expert_mode = derive_mode(m, plan.tiers) == Mode::kExpertStreaming;
  // Streamed tensors compute where their slots live: GPU-visible memory on a unified
  // machine, host RAM for the CPU otherwise.
  const Tier streamed_computes_on = lim.unified && lim.has_gpu ? Tier::kGpu : Tier::kRam;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorDesc& t = m.tensors[i];
    const Tier tier = plan.tiers[i];
    const auto L = static_cast<size_t>(pipeline_layer(m, t));
    Tier computes_on = tier == Tier::kStorage ? streamed_computes_on : tier;
    // A tied head on a discrete GPU: the embedding stays in RAM and a copy multiplies there.
    if (plan.gpu.tied_head_copy && t.role == model::TensorRole::kTokenEmbedding) {
      computes_on = Tier::kGpu;
      mem.gpu_weights += t.bytes;
      tally.any_gpu = true;
    }
    const double compute_s = tensor_compute_s(m, t, p, c, computes_on);
    tally.lc.compute_s[L] += compute_s;
    if (model::is_moe_expert(t.role)) tally.expert_compute_s[L] += compute_s;
    if (tier == Tier::kGpu) {
      tally.any_gpu = true;
      mem.gpu_weights += t.bytes;
      if (model::is_attention(t.role) && t.layer >= 0) tally.kv_gpu[L] = true;
    } else if (tier == Tier::kRam) {
      mem.ram_weights += t.bytes;
    } else if (expert_mode && model::is_moe_expert(t.role) && t.n_expert > 0) {
      const uint64_t slice = t.bytes / static_cast<uint64_t>(t.n_expert);
      tally.expert_bytes[L] += slice;
      tally.expert_slot[L] += align_up(slice) + kAlign;  // as ExpertProvider lays out a slot
      tally.expert_total_bytes += t.bytes;
    } else {
      tally.streamed_bytes[L] += t.bytes;
      tally.streamed_tensors[L].push_back(&t);
    }
  }
  return tally;
}

// The KV cache (per layer, on the GPU when the layer's attention is there), the GPU's
// work buffers and context, and what a discrete GPU's split adds.
void add_fixed_costs(const ModelTensors& m, const Budgets& b, const CostModel& c, const Limits& lim,
                     const GpuSplit& gpu, Tally& tally, MemoryPlan& mem) {
  const uint64_t kv_layer = kv_bytes(m, b) / std::max(1, m.n_layer);
  for (size_t L = 0; L < static_cast<size_t>(m.n_layer); ++L)
    (tally.kv_gpu[L] ? mem.kv_gpu : mem.kv_ram) += kv_layer;
  if (tally.any_gpu) {
    mem.work_gpu = gpu_work_bytes(m, b);
    mem.overhead_gpu = c.gpu_context_bytes;
  }
  if (lim.unified) return;
  // A layer split: the host layers' KV rows mirrored, their staging slot and the prompt
  // pass's own work buffers (split_overhead less the KV already counted).
  const int first = m.n_layer - gpu.layers;
  if (gpu.any() && gpu.layers < m.n_layer) {
    mem.kv_gpu += kv_layer * static_cast<uint64_t>(first);
    mem.work_gpu += split_overhead(m, b, layer_bytes(m), first) - kv_bytes(m, b);
  }
  // The expert split: the prompts' slot for one layer's experts, and per host-expert layer
  // and token the round trip (rows down, the handshake with the host thread, outputs up).
  if (gpu.host_experts > 0) {
    const std::vector<uint64_t> experts = layer_bytes(m, /*experts_only=*/true);
    mem.work_gpu += *std::max_element(experts.begin(), experts.end());
    for (int L = first; L < first + gpu.host_experts; ++L) {
      if (experts[static_cast<size_t>(L)] > 0)  // (leading dense layers make no round trip)
        tally.lc.compute_s[static_cast<size_t>(L)] += c.host_expert_sync_s;
    }
  }
}

// The dense streaming pool and its reads.
struct Pool {
  int layers = 0;  // pipeline layers with dense-streamed tensors
  int depth = 0;   // layers read ahead
  StreamIo io;
  uint64_t storage_bytes = 0;  // read per token
};

// One slot per streamed layer in memory (the one computing and `depth` being read), each
// big enough for the largest layer's streamed tensors; each layer's reads at the rate the
// pool's bytes in flight reach (stream_io).
Pool size_pool(const profiler::StorageProfile& st, const CostModel& c, Tally& tally, Plan& plan,
               MemoryPlan& mem) {
  Pool pool;
  uint64_t slot_bytes = 0, dense_streamed = 0;
  std::vector<uint64_t> read_sizes;
  const size_t n_pipe = tally.streamed_bytes.size();
  for (size_t L = 0; L < n_pipe; ++L) {
    if (tally.streamed_bytes[L] == 0) continue;
    ++pool.layers;
    const LayerReads reads = layer_reads(tally.streamed_tensors[L]);
    slot_bytes = std::max(slot_bytes, reads.slot_bytes);
    read_sizes.insert(read_sizes.end(), reads.sizes.begin(), reads.sizes.end());
    dense_streamed += tally.streamed_bytes[L];
  }
  pool.depth =
      pool.layers == 0 ? 0 : std::clamp(plan.prefetch_depth, 1, std::max(1, pool.layers - 1));
  if (pool.layers == 1) pool.depth = 1;
  pool.io = stream_io(st, {}, 0, c.max_queue_depth);
  if (pool.layers > 0) {
    const double layer = static_cast<double>(dense_streamed) / pool.layers;
    pool.io = stream_io(st, read_sizes, (pool.depth - 0.5) * layer, c.max_queue_depth);
  }
  for (size_t L = 0; L < n_pipe; ++L) {
    if (tally.streamed_bytes[L] == 0) continue;
    pool.storage_bytes += tally.streamed_bytes[L];
    tally.lc.read_s[L] = static_cast<double>(tally.streamed_bytes[L]) / pool.io.bps;
  }
  plan.prefetch_depth = pool.depth;
  plan.pool_slot_bytes = slot_bytes;
  plan.pool_slots = pool.layers ? static_cast<uint32_t>(std::min(pool.depth + 1, pool.layers)) : 0;
  mem.pool = plan.pool_slot_bytes * plan.pool_slots;
  return pool;
}

// The resident loader reads neighbouring resident tensors as one 4 KiB-aligned run: up
// to one block at each end of every run beyond their bytes (tensors are in file order).
// Not a plan figure, but it must fit.
uint64_t resident_slack(const std::vector<Tier>& tiers) {
  uint64_t slack = 0;
  for (size_t i = 0; i < tiers.size(); ++i) {
    const bool starts_run = tiers[i] == Tier::kRam && (i == 0 || tiers[i - 1] != Tier::kRam);
    slack += starts_run ? 2 * kAlign : 0;
  }
  return slack;
}

// The expert cache's expected behaviour per token.
struct ExpertCache {
  double hit = 1.0;
  double misses_per_token = 0;
  uint64_t storage_bytes = 0;  // missed experts read
};

// Expert cache (expert-streaming): slots of the provider's layout (the largest layer's
// three aligned slices), as many as fit in the RAM left over less a margin for what the
// ledger does not see, at least two layers' worth of routed experts.
uint64_t cache_slots(const ModelTensors& m, const CostModel& c, const Limits& lim, uint64_t used,
                     uint64_t slot, uint64_t experts_total) {
  const uint64_t taken = used + expert_cache_margin(c, lim.ram);
  const uint64_t min_slots = 2 * static_cast<uint64_t>(std::max<int64_t>(m.n_expert_used, 1));
  uint64_t slots = taken < lim.ram ? (lim.ram - taken) / slot : 0;
  return std::min(std::max(slots, min_slots), experts_total);
}

// Sizes the expert cache and charges each MoE layer its expected misses: one token routes
// n_used experts; their reads start together at route() and each expert computes as its
// bytes arrive, so the layer's expert compute hides reads.
ExpertCache size_expert_cache(const ModelTensors& m, const profiler::StorageProfile& st,
                              const CostModel& c, const Limits& lim, uint64_t slack, Tally& tally,
                              Plan& plan, MemoryPlan& mem) {
  ExpertCache cache;
  if (tally.expert_total_bytes == 0) {
    plan.expert_cache_experts = 0;
    return cache;
  }
  const size_t n_pipe = tally.expert_bytes.size();
  uint64_t experts_total = 0;
  for (size_t L = 0; L < n_pipe; ++L)
    experts_total += tally.expert_bytes[L] > 0 ? static_cast<uint64_t>(m.n_expert) : 0;
  const uint64_t slot = *std::max_element(tally.expert_slot.begin(), tally.expert_slot.end());
  plan.expert_slot_bytes = slot;
  const uint64_t slots = cache_slots(m, c, lim, mem.ram_total() + slack, slot, experts_total);
  plan.expert_cache_experts = static_cast<uint32_t>(slots);
  mem.expert_cache = slots * slot;
  const std::vector<double> layer_hit =
      expected_layer_hits(m, tally.expert_bytes, slots, experts_total);
  const double lat = read_latency_s(st);
  const auto n_used = static_cast<double>(m.n_expert_used);
  double hit_sum = 0;
  int moe_layers = 0;
  for (size_t L = 0; L < n_pipe; ++L) {
    if (tally.expert_bytes[L] == 0) continue;
    const double miss = 1 - layer_hit[L];
    const double miss_bytes = n_used * tally.expert_bytes[L] * miss;
    const double one_read = tally.expert_bytes[L] / st.seq_read_bps + lat;
    tally.lc.demand_io_s[L] += n_used * miss * one_read;
    tally.lc.demand_s[L] += expected_miss_stall(static_cast<int>(m.n_expert_used), miss, one_read,
                                                tally.expert_compute_s[L]);
    cache.storage_bytes += static_cast<uint64_t>(miss_bytes);
    cache.misses_per_token += n_used * miss;
    hit_sum += layer_hit[L];
    ++moe_layers;
  }
  cache.hit = moe_layers > 0 ? hit_sum / moe_layers : 1.0;
  return cache;
}

// The prediction from the per-layer costs, and the plan's remaining figures.
void predict(const ModelTensors& m, const Budgets& b, const profiler::StorageProfile& st,
             const Tally& tally, const Pool& pool, const ExpertCache& cache, Plan& plan) {
  const LayerCosts& lc = tally.lc;
  const uint64_t storage_bytes = pool.storage_bytes + cache.storage_bytes;
  Prediction& pr = plan.prediction;
  pr = Prediction{};
  pr.compute_s = std::accumulate(lc.compute_s.begin(), lc.compute_s.end(), 0.0);
  pr.io_demand_s = std::accumulate(lc.demand_io_s.begin(), lc.demand_io_s.end(), 0.0);
  pr.io_s = std::accumulate(lc.read_s.begin(), lc.read_s.end(), 0.0) + pr.io_demand_s;
  pr.seconds_per_token = simulate(lc, pool.depth + 1);
  pr.tok_per_s = pr.seconds_per_token > 0 ? 1.0 / pr.seconds_per_token : 0;
  pr.storage_bytes_per_token = storage_bytes;
  pr.expert_hit_rate = cache.hit;
  pr.expert_hit_rate_recorded = tally.expert_total_bytes > 0 && has_recorded_routing(m);
  pr.expert_misses_per_token = cache.misses_per_token;
  pr.storage_bound_tok_s =
      storage_bytes > 0 ? st.seq_read_bps / static_cast<double>(storage_bytes) : 0;
  pr.io_bound = pr.io_s > pr.compute_s;
  pr.stream_read_bps = pool.layers > 0 ? pool.io.bps : 0;
  plan.mode = derive_mode(m, plan.tiers);
  plan.io_request_bytes = pool.io.request_bytes;
  plan.io_queue_depth = pool.io.queue_depth;
  plan.n_ctx = b.n_ctx;
  plan.n_seq = b.n_seq;
}

}  // namespace
}  // namespace detail

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kGpu:
      return "gpu";
    case Tier::kRam:
      return "ram";
    case Tier::kStorage:
      return "storage";
  }
  return "?";
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kFullResident:
      return "full-resident";
    case Mode::kExpertStreaming:
      return "expert-streaming";
    case Mode::kDenseFfnStreaming:
      return "dense-ffn-streaming";
    case Mode::kFullStreaming:
      return "full-streaming";
  }
  return "?";
}

bool evaluate(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b,
              const CostModel& c, Plan& plan) {
  using namespace detail;
  const Limits lim = limits(p, b);
  MemoryPlan mem;
  mem.ram_limit = lim.ram;
  mem.gpu_limit = lim.gpu;
  mem.unified = lim.unified;
  mem.overhead_ram = process_overhead_bytes(m, c);
  mem.work_ram = work_bytes(m, b);
  plan.gpu = gpu_split_of(m, plan.tiers);
  Tally tally = tally_tensors(m, p, c, lim, plan, mem);
  add_fixed_costs(m, b, c, lim, plan.gpu, tally, mem);
  const Pool pool = size_pool(p.storage, c, tally, plan, mem);
  const uint64_t slack = resident_slack(plan.tiers);
  const ExpertCache cache = size_expert_cache(m, p.storage, c, lim, slack, tally, plan, mem);
  plan.memory = mem;
  predict(m, b, p.storage, tally, pool, cache, plan);
  const bool ram_ok = mem.ram_total() + slack <= lim.ram;
  const bool gpu_ok = mem.gpu_total() <= (tally.any_gpu ? lim.gpu : ~uint64_t{0});
  return ram_ok && gpu_ok;
}

}  // namespace hypura::scheduler
