// `hypura inspect MODEL [--tensors] [--json] [--full-metadata]`: what a model file holds.
//
// Reads the header and tensor directory only (never tensor data), so it takes
// milliseconds even on files larger than RAM. A bad file prints the validation error,
// which names the problem and its byte offset, on stderr and exits with status 1.
#include <iostream>
#include <memory>
#include <optional>

#include "cli/command.h"
#include "cli/inspect_report.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "runtime/coactivation.h"
#include "runtime/device_choice.h"
#include "runtime/engine.h"
#include "runtime/tiered_weights.h"
#include "scheduler/plan_request.h"
#include "scheduler/render.h"

namespace hypura::cli {
namespace {

struct InspectArgs {
  std::string model;
  bool tensors = false;
  bool json = false;
  bool full_metadata = false;
  bool plan = false;                // --plan: where this machine would put each tensor
  scheduler::PlanRequest plan_request;
};

int run_inspect(const InspectArgs& args) {
  std::string path = resolve_model_path(args.model);
  if (path.empty()) {
    std::cerr << "hypura inspect: no model given and no default model in test-models/ "
                 "(run scripts/fetch-models.sh)\n";
    return 2;
  }
  Result<gguf::GgufFile> file = gguf::GgufFile::open(path);
  if (!file.is_ok()) {
    std::cerr << "hypura inspect: " << file.status().message() << "\n";
    return 1;
  }
  InspectReport report = build_inspect_report(*file);
  InspectOptions options{.tensors = args.tensors, .full_metadata = args.full_metadata};

  // --plan: the placement this machine would use (scheduler/plan_request.h).
  std::optional<scheduler::PlannedModel> planned;
  std::string device_line;
  if (args.plan) {
    scheduler::PlanRequest request = args.plan_request;
    if (auto shape = scheduler::model_tensors_from_gguf(*file); shape.is_ok() && shape->n_expert > 0) {
      request.expert_frequency = runtime::CoactivationStats::recorded_frequency(
          path, file->total_bytes(), shape->n_layer, static_cast<int>(shape->n_expert));
    }
    auto pm = scheduler::plan_model(*file, path, request);
    if (!pm.is_ok()) {
      std::cerr << "hypura inspect: plan: " << pm.status().message() << "\n";
      return 1;
    }
    planned = std::move(pm).value();
    // The device decision run/bench/serve make in front of this plan (--device auto).
    if (auto hp = model::read_hparams(*file); hp.is_ok()) {
      auto choice = runtime::choose_device(runtime::DeviceRequest::kAuto, *file, *hp,
                                           args.plan_request.n_ctx, false, runtime::kMaxBatch);
      device_line = choice.is_ok() ? choice->reason : choice.status().message();
    } else {
      device_line = "cpu: " + hp.status().message();
    }
  }

  if (args.json) {
    nlohmann::ordered_json j = report_to_json(report, *file, options);
    if (planned) {
      j["plan"] = nlohmann::ordered_json::parse(
          scheduler::plan_to_json(planned->plan, planned->tensors, args.tensors).dump());
      j["plan"]["ledger_dry_run"] = runtime::ledger_dry_run(planned->plan.memory);
      j["plan"]["device"] = device_line;
    }
    // Metadata strings are untrusted bytes: invalid UTF-8 is replaced, never fatal.
    std::cout << j.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    std::cout << report_to_text(report, *file, options);
    if (planned) {
      std::cout << "\n" << scheduler::plan_to_text(planned->plan, planned->tensors)
                << "Ledger (dry run of the plan's allocations): "
                << runtime::ledger_dry_run(planned->plan.memory) << "\n"
                << "Device (--device auto of run, bench, serve): " << device_line << "\n";
    }
  }
  return 0;
}

std::function<int()> setup_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  app.add_option("model", args->model, "GGUF file (first split file for split models); "
                                       "default: the default test model");
  app.add_flag("--tensors", args->tensors, "list every tensor");
  app.add_flag("--json", args->json, "machine-readable output (schema in docs/GGUF.md)");
  app.add_flag("--full-metadata", args->full_metadata, "print long metadata arrays in full");
  app.add_flag("--plan", args->plan, "also print the placement plan for this machine (docs/PLANNER.md)");
  app.add_option("--profile", args->plan_request.profile_file, "hardware profile JSON to plan with");
  app.add_option("--ram-budget", args->plan_request.ram_budget, "host memory budget for --plan, e.g. 3G");
  app.add_option("--gpu-budget", args->plan_request.gpu_budget, "GPU memory budget for --plan");
  app.add_option("--reserve", args->plan_request.reserve, "RAM left to the OS (default 2G)");
  app.add_option("--context", args->plan_request.n_ctx, "context length for --plan (KV cache), default 4096")
      ->check(CLI::Range(int64_t{1}, kMaxContextTokens));
  return [args] { return run_inspect(*args); };
}

const Registrar kRegistrar({"inspect", "show a model's metadata, tensors and sizes", 20,
                            setup_inspect});

}  // namespace
}  // namespace hypura::cli
