// The placement plan: for every tensor a tier (GPU, RAM, storage), the streaming pool,
// the prefetch depth, the expert cache, the predicted speed, and why.
//
//   Result<Plan> place(const ModelTensors&, const HardwareProfile&, const Budgets&)
//
// place() is a pure, deterministic function: the same inputs give the same plan. The
// objective (docs/PLANNER.md): minimise the predicted time per generated token, with
// storage reads overlapped with compute, subject to the memory limits, counting the KV
// cache, work buffers, pool and runtime overhead. The mode is derived from the placement:
//   nothing on storage                    -> full-resident
//   only MoE expert tensors on storage    -> expert-streaming
//   only dense FFN tensors on storage     -> dense-FFN-streaming
//   anything else on storage              -> full-streaming
//
// Thread-safety: pure functions over plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "profiler/hardware_profile.h"
#include "scheduler/model_tensors.h"

namespace hypura::scheduler {

enum class Tier { kGpu, kRam, kStorage };
const char* tier_name(Tier tier);  // "gpu", "ram", "storage"

enum class Mode { kFullResident, kExpertStreaming, kDenseFfnStreaming, kFullStreaming };
const char* mode_name(Mode mode);  // "full-resident", "expert-streaming", ...

struct Budgets {
  std::optional<uint64_t> gpu_bytes;      // --gpu-budget: cap on GPU memory used
  std::optional<uint64_t> ram_bytes;      // --ram-budget: cap on host memory (peak RSS)
  std::optional<uint64_t> reserve_bytes;  // RAM left to the OS; default: the profile's
  int64_t n_ctx = 4096;                   // context length: sizes the KV cache
  int n_seq = 1;                          // sequences decoded at once: a KV cache each
                                          // (0: plan_model picks default_parallel)
  int64_t n_batch = 512;                  // prompt tokens per batch: sizes work buffers
  uint64_t gpu_work_bytes = 0;            // the GPU blocks' buffers (0: estimated from n_batch)
  int kv_bytes_per_element = 2;           // F16 KV cache (4 for F32)
  bool use_gpu = true;                    // false: plan without the GPU tier
  int max_gpu_layers = -1;  // --gpu-layers: at most this many on a discrete GPU (-1: as fit)
  // --cpu-moe-layers: a MoE model on a discrete GPU keeps at least the routed experts of the
  // first N layers in RAM (the expert split, even when more would fit; -1: as fit).
  int min_host_expert_layers = -1;
};

// Constants of the cost model, in one place (docs/PLANNER.md explains each).
struct CostModel {
  // Fraction of the measured RAM read bandwidth a CPU decode step reaches, for types and
  // profiles without a decode probe (docs/PLANNER.md, "Constants of the cost model").
  double cpu_efficiency = 0.85;
  // The same for GPU kernels against the device's copy bandwidth (read + written, as
  // compute::cuda::measure_copy_bandwidth gives it).
  double gpu_efficiency = 0.39;
  double per_layer_overhead_s = 20e-6;  // norms, RoPE, attention at short contexts, per layer
  // A layer of the expert split whose experts compute on the CPU (GpuSplit::host_experts),
  // per token: the rows down, the handshake with the host thread, the outputs up, and the
  // CPU idle while the GPU computes the next layer's attention.
  double host_expert_sync_s = 90e-6;
  // The process beside weights, KV cache, work buffers and pool (process_overhead_bytes),
  // fitted to VmRSS while loading small models (docs/PLANNER.md, "Memory accounting"):
  uint64_t process_base_bytes = uint64_t{10} << 20;  // code, libraries: before the model opens
  uint64_t metadata_element_bytes = 52;              // one parsed metadata array element
  uint64_t token_bytes = 134;                        // one vocabulary token in the tokenizer
  uint64_t merge_bytes = 80;                         // one BPE merge in the tokenizer
  uint64_t vocab_sampling_bytes = 16;  // per vocabulary entry: the sampler's candidates
  uint64_t process_slack_bytes = uint64_t{4} << 20;  // allocator slack, thread stacks, I/O rings
  uint64_t gpu_context_bytes = uint64_t{512} << 20;  // CUDA context, allocator slack
  int max_prefetch_depth = 8;
  uint32_t max_queue_depth = 64;  // device reads in flight at most (the I/O engine's ring)
  // Expert-streaming: the cache takes the host memory left over except this margin,
  // max(min bytes, fraction x the RAM limit), for memory the ledger does not see.
  double expert_cache_margin = 0.03;
  uint64_t expert_cache_margin_min_bytes = uint64_t{64} << 20;
};

// Memory the plan implies, by owner (bytes). Peak host use is ram_total().
struct MemoryPlan {
  uint64_t ram_limit = 0, gpu_limit = 0;  // what the plan had to fit in
  uint64_t ram_weights = 0, gpu_weights = 0;
  uint64_t kv_ram = 0, kv_gpu = 0;
  uint64_t work_ram = 0, work_gpu = 0;
  uint64_t pool = 0;          // streaming slots (RAM)
  uint64_t expert_cache = 0;  // cached experts (RAM)
  uint64_t overhead_ram = 0, overhead_gpu = 0;
  bool unified = false;  // GPU bytes are also RAM bytes

  uint64_t ram_total() const {
    return ram_weights + kv_ram + work_ram + pool + expert_cache + overhead_ram +
           (unified ? gpu_total() : 0);
  }
  uint64_t gpu_total() const { return gpu_weights + kv_gpu + work_gpu + overhead_gpu; }
};

struct Prediction {
  double tok_per_s = 0;
  double seconds_per_token = 0;
  double compute_s = 0;    // per token, all tiers, serial
  double io_s = 0;         // per token, device busy time
  double io_demand_s = 0;  // part of io_s that cannot be prefetched (expert misses)
  uint64_t storage_bytes_per_token = 0;
  // Expected expert-cache hit rate: from ModelTensors::expert_frequency when recorded (the
  // cache holding the most often routed experts), else uniform routing; 1 when nothing
  // streams.
  double expert_hit_rate = 0;
  bool expert_hit_rate_recorded = false;  // expert_hit_rate came from recorded routing
  double expert_misses_per_token = 0;     // experts read per generated token (expert-streaming)
  double storage_bound_tok_s = 0;         // seq bandwidth / streamed bytes per token (0: none)
  // The rate dense streaming's reads are predicted to reach: the profile's grid point the
  // pool's bytes in flight reach (0: nothing dense streams). At most seq_read_bps.
  double stream_read_bps = 0;
  bool io_bound = false;
};

// What a discrete GPU (CUDA) computes, from the tiers: the output head (output_norm and
// the output matrix), the last `layers` layers, and the token embedding when every layer is
// there; the CPU computes the layers before. host_experts: of the GPU's layers, the first
// host_experts keep their routed experts in host memory, where the CPU computes them (the
// expert split of a MoE model: the GPU holds every layer's attention, router and KV cache).
// tied_head_copy: the head multiplies by the token embedding (tied weights), which stays in RAM for
// the CPU's embedding and is copied to the GPU too. On a unified GPU (assign_gpu's tensor split)
// this only describes the head and a suffix, not what runs.
struct GpuSplit {
  bool head = false;
  int layers = 0;
  int host_experts = 0;
  bool embedding = false;
  bool tied_head_copy = false;
  bool any() const { return head || layers > 0 || embedding; }
};

struct Plan {
  Mode mode = Mode::kFullResident;
  std::vector<Tier> tiers;  // parallel to ModelTensors::tensors
  // Streaming pool for dense tensors on storage: one slot per layer in memory (the one
  // computing plus prefetch_depth being read); a slot holds every streamed tensor of a
  // layer, file neighbours as one read, each read at its file offset's residue modulo 4 KiB
  // (O_DIRECT): slot_bytes is what StreamingProvider allocates for the largest layer.
  uint32_t pool_slots = 0;
  uint64_t pool_slot_bytes = 0;
  int prefetch_depth = 0;  // layers read ahead of the one computing
  // Expert cache (expert-streaming): capacity in experts (one expert = its gate, up and
  // down slices in one layer) of expert_slot_bytes each: the runtime's slot, the largest
  // layer's three slices each rounded up to 4 KiB plus one spare block (ExpertProvider).
  uint32_t expert_cache_experts = 0;
  uint64_t expert_slot_bytes = 0;
  // Storage reads: request size and queue depth. Dense streaming: the grid point its
  // bytes in flight reach, the depth raised so the tensors' segments hold those bytes;
  // otherwise the profile's best.
  uint64_t io_request_bytes = 0;
  uint32_t io_queue_depth = 0;
  int64_t n_ctx = 0;
  int n_seq = 1;  // sequences with a KV cache each (Budgets::n_seq)
  GpuSplit gpu;   // the discrete GPU's share (none without one)
  MemoryPlan memory;
  Prediction prediction;
  std::vector<std::string> explanation;  // human-readable reasons, in order

  uint64_t bytes_on(const ModelTensors& m, Tier tier) const;
};

GpuSplit gpu_split_of(const ModelTensors& model, const std::vector<Tier>& tiers);

// What one generated token reads from each tier (each tensor's access_per_token share of
// its bytes, where the plan put it) and moves over the bus to and from a discrete GPU:
// the residual rows up when a CPU stage runs first, the logits down. prompt_bus_bytes: a
// prompt batch's copies when it runs every layer on the GPU (the CPU's layers, whole).
struct TierTraffic {
  uint64_t gpu_bytes = 0, ram_bytes = 0, storage_bytes = 0;
  uint64_t bus_bytes_per_token = 0;
  uint64_t prompt_bus_bytes = 0;
};
TierTraffic tier_traffic(const ModelTensors& model, const Plan& plan);

// The bandwidths a token's traffic is timed at (bytes per second; 0: unknown): the GPU's
// memory, the host's memory read bandwidth, storage's sequential reads, the bus (pinned
// host-to-device copies).
struct TrafficRates {
  double gpu_bps = 0, ram_bps = 0, storage_bps = 0, bus_bps = 0;
};
// The memory-bound ceiling a token's traffic implies. Each tier's seconds are its bytes
// over its bandwidth; weights streamed from storage are read into RAM and then computed
// from there, so they count in ram_s too. One sequence's decode runs its stages one after
// the other (the CPU's layers, the bus, the GPU's layers), while storage reads are
// prefetched under compute: seconds = max(storage_s, ram_s + bus_s + gpu_s), tok_s its
// inverse, limit the largest term ("gpu", "ram", "storage" or "bus"). A term with bytes but
// no known rate leaves the bound unknown (tok_s 0, limit "unknown").
struct TrafficBound {
  double gpu_s = 0, ram_s = 0, storage_s = 0, bus_s = 0;
  double seconds = 0, tok_s = 0;
  std::string limit;
};
TrafficBound traffic_bound(const TierTraffic& traffic, const TrafficRates& rates);

// Host memory the process holds beside the plan's other figures (weights, KV cache, work
// buffers, pool, expert cache): code, the parsed GGUF directory, the tokenizer, the
// sampler and slack. Computed from the model so that a plan is reproducible and every
// command that plans the same model under the same budget gets the same plan.
uint64_t process_overhead_bytes(const ModelTensors& model, const CostModel& cost = {});

// REQUIRES: model has tensors. Fails (kResourceExhausted, with the numbers) when even
// streaming everything streamable cannot fit the memory limits.
Result<Plan> place(const ModelTensors& model, const profiler::HardwareProfile& profile,
                   const Budgets& budgets, const CostModel& cost = {});

// The sequences `serve` decodes at once when --parallel is not given: as many KV caches of
// n_ctx as fit in a quarter of the host memory limit (the --ram-budget or usable memory),
// between 1 and kDefaultMaxParallel. plan_model then takes 1 when the plan streams
// experts (their union over several sequences outgrows the expert cache).
inline constexpr int kDefaultMaxParallel = 4;
int default_parallel(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b);

// The same on a plan that holds every layer and the head in a discrete GPU's memory, KV
// caches there too: a batched decode step there costs little more than one sequence's, so
// up to kGpuMaxParallel sequences (what one step's attention launch takes), as many as fit
// in half of the GPU memory the plan leaves free. Other plans: plan.n_seq.
inline constexpr int kGpuMaxParallel = 16;
int gpu_parallel(const ModelTensors& m, const Plan& plan);

// ---- the cost model, exposed so tests can compare placements ----

// Fills memory, pool, prefetch, expert cache and prediction for given tiers and depth,
// and the mode. Returns false when the tiers do not fit the limits.
bool evaluate(const ModelTensors& model, const profiler::HardwareProfile& profile,
              const Budgets& budgets, const CostModel& cost, Plan& plan);

// Simple alternatives the planner must never lose to (tests):
// every layer kept whole, layers resident in order until memory is full, the rest streamed.
Result<Plan> place_layers_in_order(const ModelTensors& model,
                                   const profiler::HardwareProfile& profile, const Budgets& budgets,
                                   const CostModel& cost = {});
// Everything through mmap and the page cache: resident speed when it fits, else every
// byte a token touches is faulted in from storage, synchronously.
Prediction predict_mmap(const ModelTensors& model, const profiler::HardwareProfile& profile,
                        const Budgets& budgets, const CostModel& cost = {});

}  // namespace hypura::scheduler
