#include "scheduler/plan_request.h"

#include "profiler/decode_rates.h"
#include "profiler/profiler.h"
#include "profiler/system_info.h"

namespace hypura::scheduler {
namespace {

// A model this far below usable memory is resident whatever the storage speed.
constexpr uint64_t kComfortBytes = uint64_t{2} << 30;

}  // namespace

Result<profiler::HardwareProfile> profile_for(const gguf::GgufFile& file, const PlanRequest& r) {
  if (!r.profile_file.empty()) return profiler::load_profile_file(r.profile_file);
  const uint64_t reserve = r.budgets.reserve_bytes.value_or(profiler::kDefaultReserveBytes);
  const profiler::MemoryProfile mem = profiler::probe_memory(reserve);
  if (!r.budgets.ram_bytes && file.total_bytes() + kComfortBytes < mem.usable_bytes)
    return profiler::load_or_quick_measure(reserve, profiler::matrix_shapes(file));
  profiler::ProfileOptions po;
  po.model_path = file.paths().front();
  po.decode_shapes = profiler::matrix_shapes(file);
  po.progress = r.progress;
  po.reserve_bytes = r.budgets.reserve_bytes;
  return profiler::load_or_measure(po);
}

Result<PlannedModel> plan_model(const gguf::GgufFile& file, const PlanRequest& r) {
  PlannedModel pm;
  HYPURA_ASSIGN_OR_RETURN(pm.tensors, model_tensors_from_gguf(file));
  pm.tensors.expert_frequency = r.expert_frequency;
  pm.budgets = r.budgets;
  if (pm.budgets.n_ctx <= 0) return invalid_argument("--context must be positive");
  if (r.cap_context && pm.tensors.n_ctx_train > 0)
    pm.budgets.n_ctx = std::min(pm.budgets.n_ctx, pm.tensors.n_ctx_train);
  HYPURA_ASSIGN_OR_RETURN(pm.profile, profile_for(file, r));
  if (r.gpu && r.budgets.use_gpu) {
    profiler::GpuProfile g = *r.gpu;
    for (const profiler::GpuProfile& measured : pm.profile.gpus) {
      if (measured.name != g.name) continue;
      if (g.memory_bandwidth_bps <= 0) g.memory_bandwidth_bps = measured.memory_bandwidth_bps;
      g.h2d_pinned_bps = measured.h2d_pinned_bps;
      g.h2d_pageable_bps = measured.h2d_pageable_bps;
    }
    pm.profile.gpus = {g};
  }
  const bool auto_parallel = pm.budgets.n_seq == 0;
  if (auto_parallel) pm.budgets.n_seq = default_parallel(pm.tensors, pm.profile, pm.budgets);
  HYPURA_ASSIGN_OR_RETURN(pm.plan, place(pm.tensors, pm.profile, pm.budgets, pm.cost));
  // Streamed experts: sequences decoding together route to the union of their experts,
  // which the expert cache cannot hold (the moe under 3 GiB read 2-4x the bytes per token
  // at 4 sequences and ran at 0.6-0.9x of one, docs/BATCHING.md), so by default requests
  // take turns; --parallel N still asks for N.
  if (auto_parallel && pm.budgets.n_seq > 1 && pm.plan.mode == Mode::kExpertStreaming) {
    pm.budgets.n_seq = 1;
    HYPURA_ASSIGN_OR_RETURN(pm.plan, place(pm.tensors, pm.profile, pm.budgets, pm.cost));
  }
  // A model wholly in VRAM: as many sequences as the card's free memory and a batched step
  // take, if the plan with their caches still keeps every layer there.
  const int on_gpu = auto_parallel ? gpu_parallel(pm.tensors, pm.plan) : pm.budgets.n_seq;
  if (on_gpu > pm.budgets.n_seq) {
    Budgets wider = pm.budgets;
    wider.n_seq = on_gpu;
    Result<Plan> plan = place(pm.tensors, pm.profile, wider, pm.cost);
    if (plan.is_ok() && plan->gpu.layers == pm.plan.gpu.layers && plan->gpu.head) {
      pm.budgets = wider;
      pm.plan = *std::move(plan);
    }
  }
  return pm;
}

}  // namespace hypura::scheduler
