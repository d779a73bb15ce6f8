// `hypura inspect MODEL [--tensors] [--json] [--full-metadata]`: what a model file holds.
//
// Reads the header and tensor directory only (never tensor data), so it takes
// milliseconds even on files larger than RAM. A bad file prints the validation error,
// which names the problem and its byte offset, on stderr and exits with status 1.
#include <iostream>
#include <memory>
#include <optional>
#include <utility>

#include "cli/command.h"
#include "cli/inspect_report.h"
#include "common/size.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
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
  bool plan = false;  // --plan: where this machine would put each tensor
  // --plan's options: the same as run's, so that the plan printed is the one run executes.
  uint64_t ram_budget = 0;
  uint64_t vram_budget = 0;
  std::string profile;
  std::string reserve;  // --reserve SIZE ("": the profile's)
  int64_t context = 4096;
  int gpu_layers = -1;      // --gpu-layers N: at most N (the last) layers on the GPU; -1: as fit
  int cpu_moe_layers = -1;  // --cpu-moe-layers N: experts of the first N layers in RAM
};

// The plan run, bench and serve would execute with these options (runtime::plan_weights),
// with the GPU tier of the same device decision (--device auto).
Result<scheduler::PlannedModel> plan_for(const gguf::GgufFile& file, const std::string& path,
                                         const InspectArgs& args,
                                         const runtime::DeviceChoice& device) {
  runtime::EngineOptions eo;
  eo.model_path = path;
  eo.n_ctx = args.context;
  eo.ram_budget = args.ram_budget;
  eo.gpu_budget = args.vram_budget;
  eo.profile_path = args.profile;
  eo.gpu_layers = args.gpu_layers;
  eo.cpu_moe_layers = args.cpu_moe_layers;
  scheduler::PlanRequest request = runtime::plan_request(eo, device);
  if (!args.reserve.empty()) {
    auto reserve = parse_size(args.reserve);
    if (!reserve.is_ok()) return reserve.status().with_context("--reserve");
    request.budgets.reserve_bytes = *reserve;
  }
  return runtime::plan_weights(file, request);
}

// The device decision run/bench/serve make in front of the plan (--device auto), or with
// --profile the one for the machine that profile describes (its GPU, even on a machine
// without one), and the line that explains it. Only a profile that cannot be read fails.
Result<std::pair<runtime::DeviceChoice, std::string>> plan_device(const gguf::GgufFile& file,
                                                                  const InspectArgs& args) {
  auto hp = model::read_hparams(file);
  if (!hp.is_ok()) return std::pair{runtime::DeviceChoice{}, "cpu: " + hp.status().message()};
  Result<runtime::DeviceChoice> choice = runtime::DeviceChoice{};
  if (!args.profile.empty()) {
    HYPURA_ASSIGN_OR_RETURN(const profiler::HardwareProfile profile,
                            profiler::load_profile_file(args.profile));
    choice = runtime::device_from_profile(profile, file, *hp, args.vram_budget);
  } else {
    choice =
        runtime::choose_device(runtime::DeviceRequest::kAuto, file, *hp, false, args.vram_budget);
  }
  if (!choice.is_ok()) return std::pair{runtime::DeviceChoice{}, choice.status().message()};
  return std::pair{*choice, choice->reason};
}

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

  // --plan: the placement this machine would use, as run would (runtime/tiered_weights.h).
  std::optional<scheduler::PlannedModel> planned;
  std::string device_line;
  if (args.plan) {
    auto choice = plan_device(*file, args);
    if (!choice.is_ok()) {
      std::cerr << "hypura inspect: " << choice.status().message() << "\n";
      return 1;
    }
    const runtime::DeviceChoice& device = choice->first;
    device_line = choice->second;
    auto pm = plan_for(*file, path, args, device);
    if (!pm.is_ok()) {
      std::cerr << "hypura inspect: plan: " << pm.status().message() << "\n";
      return 1;
    }
    planned = std::move(pm).value();
    if (device.kind == runtime::DeviceKind::kCuda && !planned->plan.gpu.any()) {
      device_line =
          "cpu: nothing of the model fits the GPU beside its buffers (" + device_line + ")";
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
      std::cout << "\n"
                << scheduler::plan_to_text(planned->plan, planned->tensors)
                << "Ledger (dry run of the plan's allocations): "
                << runtime::ledger_dry_run(planned->plan.memory) << "\n"
                << "Device ("
                << (args.profile.empty() ? "--device auto of run, bench, serve"
                                         : "the machine of " + args.profile)
                << "): " << device_line << "\n";
    }
  }
  return 0;
}

std::function<int()> setup_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  app.add_option("model", args->model,
                 "GGUF file (first split file for split models); "
                 "default: the default test model");
  app.add_flag("--tensors", args->tensors, "list every tensor");
  app.add_flag("--json", args->json, "machine-readable output (schema in docs/GGUF.md)");
  app.add_flag("--full-metadata", args->full_metadata, "print long metadata arrays in full");
  app.add_flag("--plan", args->plan,
               "also print the placement plan for this machine (docs/PLANNER.md)");
  add_profile_option(app, &args->profile);
  add_ram_budget_option(app, &args->ram_budget);
  add_vram_budget_option(app, &args->vram_budget);
  app.add_option("--reserve", args->reserve, "RAM left to the OS (default 2G)");
  add_context_option(app, &args->context);
  app.add_option("--gpu-layers", args->gpu_layers,
                 "with --plan: at most this many (the last) layers on the GPU, as run's "
                 "--gpu-layers (default: as many as fit)");
  app.add_option("--cpu-moe-layers", args->cpu_moe_layers,
                 "with --plan: a MoE model's routed experts of the first N layers in RAM, as "
                 "run's --cpu-moe-layers");
  return [args] { return run_inspect(*args); };
}

const Registrar kRegistrar({"inspect", "show a model's metadata, tensors and sizes", 20,
                            setup_inspect});

}  // namespace
}  // namespace hypura::cli
