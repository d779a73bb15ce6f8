// `hypura inspect MODEL [--tensors] [--json] [--full-metadata]`: what a model file holds.
//
// Reads the header and tensor directory only (never tensor data), so it takes
// milliseconds even on files larger than RAM. A bad file prints the validation error,
// which names the problem and its byte offset, on stderr and exits with status 1.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/inspect_report.h"
#include "gguf/gguf.h"

namespace hypura::cli {
namespace {

struct InspectArgs {
  std::string model;
  bool tensors = false;
  bool json = false;
  bool full_metadata = false;
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

  // ---- PLAN HOOK (scheduler engineer) ------------------------------------------------
  // `--plan` belongs here: add the flag in setup_inspect() below, build the Plan from
  // `*file` and the cached HardwareProfile, then print it after the report (text) or
  // store it as json["plan"] (JSON) before the dump. Nothing else here needs to change.
  // -------------------------------------------------------------------------------------

  if (args.json) {
    nlohmann::ordered_json j = report_to_json(report, *file, options);
    // Metadata strings are untrusted bytes: invalid UTF-8 is replaced, never fatal.
    std::cout << j.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    std::cout << report_to_text(report, *file, options);
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
  return [args] { return run_inspect(*args); };
}

const Registrar kRegistrar({"inspect", "show a model's metadata, tensors and sizes", 20,
                            setup_inspect});

}  // namespace
}  // namespace hypura::cli
