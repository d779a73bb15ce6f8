// The plan's reasons in words (Plan::explanation): the limits, the GPU's share, the fixed
// costs, what streams and why, the expert cache and the prediction.
#include <algorithm>
#include <cstdio>

#include "common/size.h"
#include "scheduler/planner_internal.h"

namespace hypura::scheduler::detail {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string gpu_split_text(const ModelTensors& m, const GpuSplit& g) {
  if (!g.any())
    return "Nothing fits on the GPU beside its work buffers: every layer computes on the CPU.";
  std::string s = "The GPU computes ";
  if (g.layers == m.n_layer) {
    s += "every layer";
  } else {
    s += "layers " + std::to_string(m.n_layer - g.layers) + "-" + std::to_string(m.n_layer - 1) +
         " (" + std::to_string(g.layers) + " of " + std::to_string(m.n_layer) + ")";
  }
  s += g.head ? " and the output head" : "";
  if (g.host_experts > 0) {
    const int first = m.n_layer - g.layers;
    s += ", except the routed experts of layers " + std::to_string(first) + "-" +
         std::to_string(first + g.host_experts - 1) +
         ", which stay in host memory and compute on the CPU (each step copies those layers' "
         "rows down and their experts' outputs up)";
  }
  s += g.embedding ? ", the embedding too" : "";
  if (g.layers < m.n_layer) {
    s += "; the CPU computes the " + std::to_string(m.n_layer - g.layers) +
         " layers before them from RAM or storage, and each step copies the residual rows to the "
         "GPU";
  }
  if (g.tied_head_copy) s += "; the tied embedding is in RAM and on the GPU (for the head)";
  return s + ".";
}

// The host memory limit and where it comes from; the GPU and its share.
void explain_limits(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b,
                    const Limits& lim, Plan& plan) {
  auto& e = plan.explanation;
  e.push_back("Host memory limit " + gib(lim.ram) + ": " + host_limit_source(p, b, lim) + ".");
  if (lim.has_gpu) {
    e.push_back(
        "GPU " + p.gpus.front().name + ": " + gib(lim.gpu) + " usable" +
        (lim.unified ? " (unified memory: GPU bytes count against the host limit too)." : "."));
    if (!lim.unified) e.push_back(gpu_split_text(m, plan.gpu));
  } else {
    e.push_back("No GPU tier: tiers are RAM and storage.");
  }
}

// The fixed costs, what stays on storage and why, and the streaming pool.
void explain_storage(const ModelTensors& m, const Budgets& b, uint64_t on_storage, Plan& plan) {
  auto& e = plan.explanation;
  const MemoryPlan& mem = plan.memory;
  e.push_back("Fixed costs: KV cache " + gib(mem.kv_ram + mem.kv_gpu) + " (" +
              std::to_string(b.n_ctx) + " tokens" +
              (b.n_seq > 1 ? " x " + std::to_string(b.n_seq) + " sequences" : std::string()) +
              "), work buffers " + gib(mem.work_ram + mem.work_gpu) + ", runtime " +
              gib(mem.overhead_ram + mem.overhead_gpu) + ".");
  uint64_t total = m.total_bytes();
  if (on_storage == 0) {
    e.push_back("Model " + gib(total) + " fits: every tensor resident, no storage reads.");
  } else {
    e.push_back(
        "Model " + gib(total) + " does not fit: " + gib(on_storage) + " stays on storage (" +
        mode_name(plan.mode) +
        "), chosen as the tensors that add the least storage traffic per byte "
        "of memory freed (MoE experts, then dense FFN, then attention and the output head).");
  }
  if (plan.pool_slots > 0) {
    e.push_back(
        "Pool: " + std::to_string(plan.pool_slots) + " layer slots of " +
        gib(plan.pool_slot_bytes) + " = " + gib(mem.pool) + "; prefetch " +
        std::to_string(plan.prefetch_depth) +
        " layers ahead (the depth with the lowest predicted time: each extra layer of prefetch "
        "costs its slots in memory, i.e. more streamed bytes).");
  }
}

// Expert streaming and its cache, or why a MoE model's experts are read whole.
void explain_experts(const ModelTensors& m, const CostModel& c, const Limits& lim,
                     uint64_t on_storage, Plan& plan) {
  auto& e = plan.explanation;
  const MemoryPlan& mem = plan.memory;
  if (plan.mode == Mode::kExpertStreaming) {
    e.push_back(
        "Expert streaming: every non-expert tensor resident (" +
        gib(mem.ram_weights + mem.gpu_weights) + "); the stacked expert tensors (" +
        gib(on_storage) +
        ") stay on storage and only the experts the "
        "routers select are read, into an expert cache that takes the host memory left after the "
        "fixed costs, less a margin of " +
        gib(expert_cache_margin(c, lim.ram)) + ".");
    e.push_back("Expert cache: " + std::to_string(plan.expert_cache_experts) + " experts of " +
                gib(plan.expert_slot_bytes) + " = " + gib(mem.expert_cache) + "; " +
                (plan.prediction.expert_hit_rate_recorded
                     ? "hit rate from the routing recorded in earlier runs (the most often routed "
                       "experts cached) "
                     : "uniform-routing hit rate ") +
                fmt("%.1f%%", 100 * plan.prediction.expert_hit_rate) +
                (plan.prediction.expert_hit_rate_recorded
                     ? ""
                     : " (real routing is more local: a lower bound)") +
                "; expected misses " + fmt("%.1f", plan.prediction.expert_misses_per_token) +
                " experts per token.");
  } else if (on_storage > 0 && m.n_expert > 0) {
    e.push_back(
        "Expert streaming does not fit (the non-expert tensors, fixed costs and a cache of two "
        "layers' routed experts exceed the limit): expert tensors on storage are read whole.");
  }
}

// The predicted speed, what bounds it, and the peak memory.
void explain_prediction(const profiler::HardwareProfile& p, const Limits& lim, Plan& plan) {
  auto& e = plan.explanation;
  const MemoryPlan& mem = plan.memory;
  const Prediction& pr = plan.prediction;
  std::string bound = pr.io_bound ? "storage-bound" : "compute-bound";
  e.push_back(
      "Predicted " + fmt("%.2f", pr.tok_per_s) + " tok/s (" + bound + ": compute " +
      fmt("%.3f", pr.compute_s) + " s/token, storage reads " + fmt("%.3f", pr.io_s) + " s/token, " +
      gib(pr.storage_bytes_per_token) + " read per token at " +
      fmt("%.2f", (pr.stream_read_bps > 0 ? pr.stream_read_bps : p.storage.seq_read_bps) / 1e9) +
      " GB/s" +
      (pr.stream_read_bps > 0
           ? " (" + fmt("%.2f", pr.stream_read_bps / p.storage.seq_read_bps) +
                 " x the disk's best " + fmt("%.2f", p.storage.seq_read_bps / 1e9) +
                 " GB/s: the profile's grid at the pool's bytes in "
                 "flight, reads of " +
                 gib(plan.io_request_bytes) + " x" + std::to_string(plan.io_queue_depth) + ")"
           : std::string()) +
      ").");
  e.push_back(
      "Peak memory: host " + gib(mem.ram_total()) + " of " + gib(lim.ram) +
      (lim.has_gpu ? ", GPU " + gib(mem.gpu_total()) + " of " + gib(lim.gpu) : std::string()) +
      ".");
}

}  // namespace

std::string gib(uint64_t bytes) {
  return format_size(bytes);
}

std::string host_limit_source(const profiler::HardwareProfile& p, const Budgets& b,
                              const Limits& lim) {
  if (b.ram_bytes && *b.ram_bytes == lim.ram) return "--ram-budget " + gib(*b.ram_bytes);
  const uint64_t reserve = b.reserve_bytes.value_or(p.memory.reserve_bytes);
  const uint64_t machine = p.memory.total_bytes - std::min(reserve, p.memory.total_bytes);
  if (p.memory.cgroup_limit_bytes && *p.memory.cgroup_limit_bytes <= machine)
    return "cgroup " + p.memory.cgroup_version + " memory limit " +
           gib(*p.memory.cgroup_limit_bytes);
  return "RAM " + gib(p.memory.total_bytes) + " - reserve " + gib(reserve);
}

void explain(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b,
             const CostModel& c, const Limits& lim, Plan& plan) {
  const uint64_t on_storage = plan.bytes_on(m, Tier::kStorage);
  explain_limits(m, p, b, lim, plan);
  explain_storage(m, b, on_storage, plan);
  explain_experts(m, c, lim, on_storage, plan);
  explain_prediction(p, lim, plan);
}

}  // namespace hypura::scheduler::detail
