// The planner's internals, shared between its files; the interface is plan.h.
//
//   memory.cc     limits, KV cache, work buffers, process overhead, context checks
//   gpu_split.cc  a discrete GPU's tensors (layer suffix, expert split), a unified one's
//   io_model.cc   storage reads: latency, dense streaming's rate, a layer's reads
//   cost.cc       compute per tensor, expert hits and stalls, the pipeline simulation
//   evaluate.cc   evaluate(): memory and prediction of given tiers, phase by phase
//   search.cc     place(): what streams, at which prefetch depth
//   explain.cc    the plan's reasons in words
//
// docs/PLANNER.md derives the model these files implement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "profiler/hardware_profile.h"
#include "scheduler/model_tensors.h"
#include "scheduler/plan.h"

namespace hypura::scheduler::detail {

// O_DIRECT's block: reads and slots are laid out on it.
inline constexpr uint64_t kAlign = 4096;
inline uint64_t align_up(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

// ---- memory.cc ----

struct Limits {
  uint64_t ram = 0, gpu = 0;
  bool has_gpu = false, unified = false;
  // A discrete GPU's tensors, chosen before the RAM/storage search (gpu_suffix): the
  // search neither streams nor counts them. Empty: no discrete GPU (or a unified one,
  // where assign_gpu splits the resident tensors instead).
  std::vector<bool> gpu_fixed;
};

// The memory limits of the profile and budgets, without the GPU's tensors (limits_for).
Limits limits(const profiler::HardwareProfile& p, const Budgets& b);
uint64_t work_bytes(const ModelTensors& m, const Budgets& b);
uint64_t gpu_work_bytes(const ModelTensors& m, const Budgets& b);
uint64_t kv_bytes(const ModelTensors& m, const Budgets& b);
// Per-layer weight bytes (layer index -> bytes of its tensors; experts_only: of its
// routed experts' stacked tensors).
std::vector<uint64_t> layer_bytes(const ModelTensors& m, bool experts_only = false);
uint64_t expert_cache_margin(const CostModel& c, uint64_t ram_limit);
Status check_context_sizes(const ModelTensors& m, const Budgets& b);

// ---- gpu_split.cc ----

uint64_t split_overhead(const ModelTensors& m, const Budgets& b, const std::vector<uint64_t>& bytes,
                        int first_gpu_layer);
// limits() plus, on a discrete GPU, its tensors (expert_split: a MoE model may keep
// routed experts in host memory).
Limits limits_for(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b,
                  const CostModel& c, bool expert_split = true);
void assign_gpu(const ModelTensors& m, const Budgets& b, const CostModel& c, const Limits& lim,
                std::vector<Tier>& tiers);
bool tied_head(const ModelTensors& m);

// ---- io_model.cc ----

double read_latency_s(const profiler::StorageProfile& s);

// Dense streaming's device reads: request size, queue depth, and the rate they reach.
struct StreamIo {
  uint64_t request_bytes = 0;
  uint32_t queue_depth = 0;
  double bps = 0;
};
StreamIo stream_io(const profiler::StorageProfile& st, const std::vector<uint64_t>& tensor_bytes,
                   double in_flight, uint32_t max_queue_depth);

struct LayerReads {
  std::vector<uint64_t> sizes;  // one per device request
  uint64_t slot_bytes = 0;
};
LayerReads layer_reads(std::vector<const TensorDesc*> layer);

// ---- cost.cc ----

double tensor_compute_s(const ModelTensors& m, const TensorDesc& t,
                        const profiler::HardwareProfile& p, const CostModel& c, Tier tier);
bool has_recorded_routing(const ModelTensors& m);
std::vector<double> expected_layer_hits(const ModelTensors& m,
                                        const std::vector<uint64_t>& expert_bytes_layer,
                                        uint64_t slots, uint64_t experts_total);
double expected_miss_stall(int n_used, double miss, double one_read, double expert_compute_s);

// Per-layer quantities of the pipeline (index n_layer is the output head).
struct LayerCosts {
  std::vector<double> compute_s;    // all tensors of the layer, on their tier's bandwidth
  std::vector<double> read_s;       // prefetchable storage reads (dense tensors)
  std::vector<double> demand_s;     // stall of reads known only when the layer runs (expert
                                    // misses): the part the layer's own compute cannot hide
  std::vector<double> demand_io_s;  // device busy time of those reads (>= demand_s)
};
double simulate(const LayerCosts& lc, int slots);

// ---- evaluate.cc ----

// Layer index used for pipelining: the output head computes after the last layer.
int pipeline_layer(const ModelTensors& m, const TensorDesc& t);
Mode derive_mode(const ModelTensors& m, const std::vector<Tier>& tiers);

// ---- explain.cc ----

std::string gib(uint64_t bytes);
// Where the host memory limit comes from: "--ram-budget 3.00 GiB", "cgroup v1 memory limit
// 320 MiB" or "RAM 24.0 GiB - reserve 2.00 GiB".
std::string host_limit_source(const profiler::HardwareProfile& p, const Budgets& b,
                              const Limits& lim);
void explain(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b,
             const CostModel& c, const Limits& lim, Plan& plan);

}  // namespace hypura::scheduler::detail
