// One call from a model file and the user's options to the plan that is printed and
// executed: `inspect --plan` prints what plan_model returns, and run, bench, serve and
// perplexity load their weights by the same call (through runtime::plan_weights, which
// adds the routing recorded in earlier runs), so every command that plans a model under
// the same options gets the same plan and the same prediction.
//
//   PlanRequest req;  req.budgets.ram_bytes = 3ull << 30;  req.budgets.n_ctx = 1024;
//   HYPURA_ASSIGN_OR_RETURN(PlannedModel pm, plan_model(file, req));
//   std::cout << plan_to_text(pm.plan, pm.tensors);
//
// Which tiers exist is decided in front of this call (Budgets::use_gpu: a device
// decision, e.g. "this model runs on the GPU", sets it); plan_model fills in the profile
// and the model-derived figures and never changes that choice.
//
// Thread-safety: may measure the machine; call from one thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "profiler/hardware_profile.h"
#include "scheduler/model_tensors.h"
#include "scheduler/plan.h"

namespace hypura::scheduler {

inline Budgets without_gpu() {
  Budgets b;
  b.use_gpu = false;
  return b;
}

struct PlanRequest {
  std::string profile_file;  // --profile FILE; empty: profile_for() chooses
  // --ram-budget, --reserve, context (capped to the model's trained length), batch, KV
  // type, and the device decision's use_gpu and gpu_bytes: off until a decision turns it
  // on (runtime/device_choice.h), since the plan must be the one that runs.
  Budgets budgets = without_gpu();
  // The device decision's GPU (name, memory): it replaces the profile's, keeping the
  // profile's measured bandwidths when the names match. Used when budgets.use_gpu.
  std::optional<profiler::GpuProfile> gpu;
  // budgets.n_ctx is capped to the model's trained length (false: bench's speed runs
  // past it, EngineOptions::n_ctx_past_trained).
  bool cap_context = true;
  bool progress = true;  // profiling progress on stderr if a measurement is needed
  // Routing recorded in earlier runs (ModelTensors::expert_frequency); empty: uniform.
  std::vector<double> expert_frequency;
};

struct PlannedModel {
  ModelTensors tensors;
  profiler::HardwareProfile profile;
  Budgets budgets;  // as planned: n_ctx capped to the trained length
  CostModel cost;
  Plan plan;
};

// The profile a plan uses: --profile FILE; else, when no RAM budget is given and the
// model is far below usable memory (its plan cannot depend on storage speed), the cached
// profile, or system facts and a memory-bandwidth probe (no storage benchmark); else the
// cache or a fresh measurement of the model's filesystem (profiler::load_or_measure).
Result<profiler::HardwareProfile> profile_for(const gguf::GgufFile& file,
                                              const PlanRequest& request);

Result<PlannedModel> plan_model(const gguf::GgufFile& file, const PlanRequest& request);

}  // namespace hypura::scheduler
