// One call from a model file and command-line style options to a plan: what `inspect
// --plan`, `run --dry-run`, `run` and `bench` share.
//
//   PlanRequest req;  req.ram_budget = "3G";  req.n_ctx = 1024;
//   HYPURA_ASSIGN_OR_RETURN(PlannedModel pm, plan_model(file, model_path, req));
//   std::cout << plan_to_text(pm.plan, pm.tensors);
//
// The profile comes from --profile FILE when given, else from the cache / a fresh
// measurement of the filesystem holding the model (profiler::load_or_measure).
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

struct PlanRequest {
  std::string profile_file;  // --profile FILE
  std::string ram_budget;    // --ram-budget SIZE ("" = none)
  std::string gpu_budget;    // --gpu-budget SIZE
  std::string reserve;       // --reserve SIZE ("" = the profile's)
  int64_t n_ctx = 4096;      // --context
  bool use_gpu = true;
  bool progress = true;      // profiling progress on stderr if a measurement is needed
  // Routing recorded in earlier runs (ModelTensors::expert_frequency); empty: uniform.
  std::vector<double> expert_frequency;
};

// Budgets from the string options; kInvalidArgument names the bad flag.
Result<Budgets> budgets_from(const PlanRequest& request);

struct PlannedModel {
  ModelTensors tensors;
  profiler::HardwareProfile profile;
  Budgets budgets;
  Plan plan;
};

Result<PlannedModel> plan_model(const gguf::GgufFile& file, const std::string& model_path,
                                const PlanRequest& request);

}  // namespace hypura::scheduler
