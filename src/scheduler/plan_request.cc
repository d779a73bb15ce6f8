#include "scheduler/plan_request.h"

#include "common/size.h"
#include "profiler/profiler.h"

namespace hypura::scheduler {
namespace {

Status parse_optional(const std::string& text, const char* flag, std::optional<uint64_t>& out) {
  if (text.empty()) return Status::ok();
  auto v = parse_size(text);
  if (!v.is_ok()) return v.status().with_context(flag);
  out = *v;
  return Status::ok();
}

}  // namespace

Result<Budgets> budgets_from(const PlanRequest& r) {
  Budgets b;
  HYPURA_RETURN_IF_ERROR(parse_optional(r.ram_budget, "--ram-budget", b.ram_bytes));
  HYPURA_RETURN_IF_ERROR(parse_optional(r.gpu_budget, "--gpu-budget", b.gpu_bytes));
  HYPURA_RETURN_IF_ERROR(parse_optional(r.reserve, "--reserve", b.reserve_bytes));
  if (r.n_ctx <= 0) return invalid_argument("--context must be positive");
  b.n_ctx = r.n_ctx;
  b.use_gpu = r.use_gpu;
  return b;
}

Result<PlannedModel> plan_model(const gguf::GgufFile& file, const std::string& model_path,
                                const PlanRequest& r) {
  PlannedModel pm;
  HYPURA_ASSIGN_OR_RETURN(pm.budgets, budgets_from(r));
  HYPURA_ASSIGN_OR_RETURN(pm.tensors, model_tensors_from_gguf(file));
  pm.tensors.expert_frequency = r.expert_frequency;
  profiler::ProfileOptions po;
  po.profile_file = r.profile_file;
  po.model_path = model_path;
  po.progress = r.progress;
  if (pm.budgets.reserve_bytes) po.reserve_bytes = pm.budgets.reserve_bytes;
  HYPURA_ASSIGN_OR_RETURN(pm.profile, profiler::load_or_measure(po));
  HYPURA_ASSIGN_OR_RETURN(pm.plan, place(pm.tensors, pm.profile, pm.budgets));
  return pm;
}

}  // namespace hypura::scheduler
