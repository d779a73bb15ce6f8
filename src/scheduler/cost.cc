// The planner's cost model: seconds a token computes with each tensor, the expert cache's
// expected hits and stalls, the pipeline of prefetched reads against compute, and the
// memory-bound ceiling of a token's traffic (docs/PLANNER.md, "Objective and cost model").
#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <utility>

#include "scheduler/planner_internal.h"

namespace hypura::scheduler {
namespace detail {
namespace {

// Weight bytes per second the tier computes a tensor of `type` with rows of n_cols at, for
// one token. The CPU: the profile's decode rate of the type at the nearest measured width
// (its kernels and memory bus together: a small VM's decode is bound by arithmetic, a
// server's by the bus), else the memory bandwidth times cpu_efficiency (profiles without
// the probe, types it does not measure).
double bandwidth(const profiler::HardwareProfile& p, const CostModel& c, Tier tier,
                 gguf::GgmlType type, int64_t n_cols) {
  const double decode = p.cpu.decode_bps(type, n_cols);
  double ram = decode > 0 ? decode : std::max(1e9, p.memory.read_bandwidth_bps) * c.cpu_efficiency;
  if (tier != Tier::kGpu || p.gpus.empty()) return ram;
  double gpu = p.gpus.front().memory_bandwidth_bps;
  return gpu > 0 ? gpu * c.gpu_efficiency : ram;
}

// Pool jobs one generated token runs with a tensor, each paying the CPU's fixed cost per
// product (CpuProfile::decode_overhead_s): one per weight matrix, but Q/K/V and a dense
// FFN's gate/up share their input and run as one job (Context::matmul_shared: K, V and up
// count none); n_expert_used per stacked expert tensor; one for a token embedding that is
// also the head (read whole); none for norms, biases and an embedding's row lookup.
double products_per_token(const ModelTensors& m, const TensorDesc& t) {
  using model::TensorRole;
  if (model::is_moe_expert(t.role))
    return static_cast<double>(std::max<int64_t>(m.n_expert_used, 1));
  switch (t.role) {
    case TensorRole::kTokenEmbedding:
      return t.access_per_token >= 1.0 ? 1.0 : 0.0;
    case TensorRole::kOutput:
    case TensorRole::kAttnQ:
    case TensorRole::kAttnQkv:
    case TensorRole::kAttnOutput:
    case TensorRole::kFfnGate:
    case TensorRole::kFfnDown:
    case TensorRole::kMoeRouter:
    case TensorRole::kSharedExpert:
      return 1.0;
    default:
      return 0.0;
  }
}

}  // namespace

// Seconds one generated token computes with tensor t on `tier`: its bytes at the tier's
// rate plus, on the CPU, each product's fixed cost.
double tensor_compute_s(const ModelTensors& m, const TensorDesc& t,
                        const profiler::HardwareProfile& p, const CostModel& c, Tier tier) {
  const double touched = t.access_per_token * static_cast<double>(t.bytes);
  const double fixed = tier == Tier::kGpu && !p.gpus.empty()
                           ? 0.0
                           : products_per_token(m, t) * p.cpu.decode_overhead_s(t.type, t.n_cols);
  return touched / bandwidth(p, c, tier, t.type, t.n_cols) + fixed;
}

bool has_recorded_routing(const ModelTensors& m) {
  const double total = std::accumulate(m.expert_frequency.begin(), m.expert_frequency.end(), 0.0);
  return m.n_expert > 0 &&
         m.expert_frequency.size() == static_cast<size_t>(m.n_layer * m.n_expert) && total > 0;
}

// Expected hit rate of an expert cache of `slots` experts, per pipeline layer (those with
// experts; others 1). With recorded routing the cache is assumed to hold the `slots` most
// often routed (layer, expert) pairs, and a layer hits with the share of its routings that
// went to its cached experts (docs/MOE.md compares it with measured hit rates). Without,
// routing is uniform and every layer hits with slots / experts_total.
std::vector<double> expected_layer_hits(const ModelTensors& m,
                                        const std::vector<uint64_t>& expert_bytes_layer,
                                        uint64_t slots, uint64_t experts_total) {
  const size_t n_pipe = expert_bytes_layer.size();
  const double uniform =
      experts_total ? static_cast<double>(slots) / static_cast<double>(experts_total) : 1.0;
  std::vector<double> hit(n_pipe, 1.0);
  for (size_t L = 0; L < n_pipe; ++L) hit[L] = expert_bytes_layer[L] > 0 ? uniform : 1.0;
  if (!has_recorded_routing(m)) return hit;
  struct Entry {
    double freq;
    size_t layer;
  };
  std::vector<Entry> entries;
  std::vector<double> layer_total(n_pipe, 0.0), layer_cached(n_pipe, 0.0);
  for (size_t L = 0; L < static_cast<size_t>(m.n_layer) && L < n_pipe; ++L) {
    if (expert_bytes_layer[L] == 0) continue;
    for (int64_t e = 0; e < m.n_expert; ++e) {
      const double f =
          m.expert_frequency[L * static_cast<size_t>(m.n_expert) + static_cast<size_t>(e)];
      entries.push_back({f, L});
      layer_total[L] += f;
    }
  }
  const size_t keep = std::min<size_t>(slots, entries.size());
  std::partial_sort(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(keep),
                    entries.end(), [](const Entry& a, const Entry& b) { return a.freq > b.freq; });
  for (size_t i = 0; i < keep; ++i) layer_cached[entries[i].layer] += entries[i].freq;
  for (size_t L = 0; L < n_pipe; ++L) {
    if (expert_bytes_layer[L] > 0 && layer_total[L] > 0) hit[L] = layer_cached[L] / layer_total[L];
  }
  return hit;
}

// Expected stall of one MoE layer for one token: k of its n_used routed experts miss with
// probability Binomial(n_used, miss), their reads take k x one_read on the device, and
// the compute of the n_used - k cached ones (expert_compute_s is all n_used) hides at most
// that much: a missed expert computes after its own read. The expectation of the stall,
// not the stall of the expected misses: one miss is a whole expert read, far longer than
// an expert's compute, so rare misses are waited for nearly whole, which
// max(0, mean io - compute) would miss (docs/PLANNER.md).
double expected_miss_stall(int n_used, double miss, double one_read, double expert_compute_s) {
  double stall = 0, p_k = std::pow(1 - miss, n_used);  // P(k = 0)
  for (int k = 1; k <= n_used; ++k) {
    p_k *= miss / std::max(1e-300, 1 - miss) * (n_used - k + 1) / k;
    if (miss >= 1) p_k = k == n_used ? 1.0 : 0.0;
    const double hidden_s = expert_compute_s * (n_used - k) / n_used;
    stall += p_k * std::max(0.0, k * one_read - hidden_s);
  }
  return stall;
}

// Steady-state seconds per token: reads in layer order on one device, at most `slots`
// streamed layers in memory (read or being computed), compute in order. Four tokens are
// simulated and the last one timed, so pipeline fill is excluded and reads for the next
// token overlap the end of the current one, as in the runtime.
double simulate(const LayerCosts& lc, int slots) {
  size_t n = lc.compute_s.size();
  std::vector<double> streamed_end;  // compute end of each streamed layer instance
  double compute_end = 0, io_free = 0, token_start = 0;
  constexpr int kTokens = 4;
  for (int tok = 0; tok < kTokens; ++tok) {
    token_start = compute_end;
    for (size_t l = 0; l < n; ++l) {
      double ready = compute_end;
      if (lc.read_s[l] > 0) {
        size_t q = streamed_end.size();
        double slot_free = q >= static_cast<size_t>(slots) ? streamed_end[q - slots] : 0.0;
        double read_end = std::max(io_free, slot_free) + lc.read_s[l];
        io_free = read_end;
        ready = std::max(ready, read_end);
      }
      double start = ready;
      if (lc.demand_io_s[l] > 0)
        io_free = std::max(io_free, start) + lc.demand_io_s[l];  // same device
      compute_end = start + lc.compute_s[l] + lc.demand_s[l];
      if (lc.read_s[l] > 0) streamed_end.push_back(compute_end);
    }
  }
  return compute_end - token_start;
}

}  // namespace detail

TierTraffic tier_traffic(const ModelTensors& m, const Plan& plan) {
  TierTraffic t;
  for (size_t i = 0; i < m.tensors.size() && i < plan.tiers.size(); ++i) {
    const TensorDesc& d = m.tensors[i];
    const auto read = static_cast<uint64_t>(d.access_per_token * static_cast<double>(d.bytes));
    const bool gpu_head_copy =
        plan.gpu.tied_head_copy && d.role == model::TensorRole::kTokenEmbedding;
    switch (gpu_head_copy ? Tier::kGpu : plan.tiers[i]) {
      case Tier::kGpu:
        t.gpu_bytes += read;
        break;
      case Tier::kRam:
        t.ram_bytes += read;
        break;
      case Tier::kStorage:
        t.storage_bytes += read;
        break;
    }
    // A prompt copies every layer tensor the GPU does not hold (StagedWeights).
    if (plan.gpu.any() && d.layer >= 0 && plan.tiers[i] != Tier::kGpu)
      t.prompt_bus_bytes += d.bytes;
  }
  if (plan.gpu.any()) {
    const bool cpu_stage = !plan.gpu.embedding;
    // A host-expert layer's rows go down and its n_used slot outputs come back up.
    const std::vector<uint64_t> experts = detail::layer_bytes(m, /*experts_only=*/true);
    const int first = m.n_layer - plan.gpu.layers;
    uint64_t host_layers = 0;  // the span's layers with experts (not its leading dense ones)
    for (int L = first; L < first + plan.gpu.host_experts && L < m.n_layer; ++L)
      host_layers += experts[static_cast<size_t>(L)] > 0 ? 1 : 0;
    const auto expert_rows =
        host_layers * 4 * static_cast<uint64_t>(m.n_embd * (1 + m.n_expert_used));
    t.bus_bytes_per_token = 4 * static_cast<uint64_t>(m.n_vocab) +
                            (cpu_stage ? 4 * static_cast<uint64_t>(m.n_embd) : 0) + expert_rows;
  }
  return t;
}

TrafficBound traffic_bound(const TierTraffic& t, const TrafficRates& r) {
  TrafficBound b;
  bool known = true;
  const auto time = [&](uint64_t bytes, double bps) {
    if (bytes == 0) return 0.0;
    if (bps <= 0) {
      known = false;
      return 0.0;
    }
    return static_cast<double>(bytes) / bps;
  };
  b.gpu_s = time(t.gpu_bytes, r.gpu_bps);
  b.ram_s = time(t.ram_bytes + t.storage_bytes, r.ram_bps);
  b.storage_s = time(t.storage_bytes, r.storage_bps);
  b.bus_s = time(t.bus_bytes_per_token, r.bus_bps);
  if (!known) {
    b.limit = "unknown";
    return b;
  }
  b.seconds = std::max(b.storage_s, b.ram_s + b.bus_s + b.gpu_s);
  b.tok_s = b.seconds > 0 ? 1 / b.seconds : 0;
  const std::pair<double, const char*> terms[] = {
      {b.gpu_s, "gpu"}, {b.ram_s, "ram"}, {b.storage_s, "storage"}, {b.bus_s, "bus"}};
  b.limit = std::max_element(std::begin(terms), std::end(terms))->second;
  return b;
}

Prediction predict_mmap(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b,
                        const CostModel& c) {
  Plan resident;
  resident.tiers.assign(m.tensors.size(), Tier::kRam);
  bool fits = evaluate(m, p, b, c, resident);
  if (fits) return resident.prediction;
  // The page cache holds less than one token's working set: a cyclic scan through an LRU
  // cache smaller than it misses every time, and each fault waits for its read.
  Prediction pr = resident.prediction;
  double touched = static_cast<double>(m.bytes_read_per_token());
  pr.storage_bytes_per_token = static_cast<uint64_t>(touched);
  pr.io_s = touched / p.storage.seq_read_bps;
  pr.io_demand_s = pr.io_s;
  pr.seconds_per_token = pr.compute_s + pr.io_s;
  pr.tok_per_s = 1.0 / pr.seconds_per_token;
  pr.io_bound = true;
  return pr;
}

}  // namespace hypura::scheduler
