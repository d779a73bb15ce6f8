// The command line shared by the hypura binary (main.cc) and the test build's hypura_faulty: the
// subcommand registry, the flags several subcommands share, and run_cli().
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "common/size.h"
#include "experts/expert_provider.h"

namespace hypura::cli {

std::vector<CommandSpec>& command_registry() {
  static std::vector<CommandSpec> registry;
  return registry;
}

std::string resolve_model_path(const std::string& arg) {
  if (!arg.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(arg, ec)) return arg;
    // Not a file: a pulled model's name, if it is one (else the path, for its error).
    Result<store::ModelStore> s = store::ModelStore::open("");
    Result<std::string> pulled = s.is_ok() ? s->path_of(arg) : Result<std::string>(s.status());
    return pulled.is_ok() ? *pulled : arg;
  }
  if (const char* env = std::getenv("HYPURA_MODEL")) return env;
  // The default model: the smallest good chat model that scripts/fetch-models.sh fetches.
  namespace fs = std::filesystem;
  for (const char* dir : {"test-models", "../test-models"}) {
    fs::path candidate = fs::path(dir) / "default.gguf";
    if (fs::exists(candidate)) return candidate.string();
  }
  return "";
}

CLI::Option* add_models_dir_option(CLI::App& app, std::string* dir) {
  return app.add_option("--models-dir", *dir,
                        "the models folder (default $HYPURA_MODELS, else "
                        "$XDG_DATA_HOME/hypura/models or ~/.local/share/hypura/models)");
}

namespace {

CLI::Option* add_size_option(CLI::App& app, const std::string& name, uint64_t* bytes,
                             const std::string& help) {
  return app.add_option_function<std::string>(
      name,
      [bytes, name](const std::string& text) {
        auto parsed = parse_size(text);
        if (!parsed.is_ok()) throw CLI::ValidationError(name, parsed.status().message());
        *bytes = parsed.value();
      },
      help);
}

}  // namespace

CLI::Option* add_ram_budget_option(CLI::App& app, uint64_t* bytes) {
  return add_size_option(
      app, "--ram-budget", bytes,
      "cap on host memory, e.g. 3G (default: the profile's usable RAM); what does not fit streams");
}

CLI::Option* add_vram_budget_option(CLI::App& app, uint64_t* bytes) {
  return add_size_option(
      app, "--vram-budget", bytes,
      "cap on GPU memory, e.g. 8G (default: the free memory less a reserve); the GPU "
      "computes the last layers that fit, the CPU the rest");
}

CLI::Option* add_profile_option(CLI::App& app, std::string* path) {
  return app
      .add_option("--profile", *path,
                  "plan with this hardware profile JSON instead of the cached one or a measurement")
      ->check(CLI::ExistingFile);
}

CLI::Option* add_threads_option(CLI::App& app, int* threads) {
  return app.add_option("-t,--threads", *threads, "compute threads (default: physical cores)")
      ->check(CLI::Range(0, kMaxThreads));
}

CLI::Option* add_device_option(CLI::App& app, std::string* device) {
  return app
      .add_option("--device", *device,
                  "where to compute: auto (the GPU takes what fits in its "
                  "memory, the CPU the rest), cpu or cuda")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
}

CLI::Option* add_context_option(CLI::App& app, int64_t* n_ctx) {
  return app
      .add_option("-c,--context", *n_ctx,
                  "context length in tokens (capped by the model's trained length)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, kMaxContextTokens));
}

void add_engine_flags(CLI::App& app, EngineFlags* flags) {
  add_threads_option(app, &flags->threads);
  add_device_option(app, &flags->device);
  app.add_option("--kv-type", flags->kv_type, "KV cache type: f16 or f32")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
  add_ram_budget_option(app, &flags->ram_budget);
  add_vram_budget_option(app, &flags->vram_budget);
  app.add_option(
         "--gpu-layers", flags->gpu_layers,
         "at most this many of the last layers on the GPU (like llama.cpp's -ngl; default: as many "
         "as fit the GPU's memory); the output head goes there whenever it fits")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option(
         "--cpu-moe-layers", flags->cpu_moe_layers,
         "MoE on a GPU: keep the routed experts of the first N layers in RAM, computed by the CPU, "
         "and the rest of every layer on the GPU (like llama.cpp's --n-cpu-moe; default: as the "
         "--vram-budget decides)")
      ->check(CLI::Range(0, 1 << 20));
  add_profile_option(app, &flags->profile);
  app.add_option("--expert-predictor", flags->expert_predictor,
                 "MoE expert streaming: what guesses the next layer's experts to read ahead "
                 "(none, coact, router, both; default both)")
      ->check(CLI::IsMember({"none", "coact", "router", "both"}));
  app.add_option("--expert-lookahead", flags->expert_lookahead,
                 "MoE expert streaming: layers ahead the router predictor guesses (default 1)")
      ->check(CLI::Range(1, experts::kMaxRouterLookahead));
  add_size_option(app, "--expert-prefetch-budget", &flags->expert_prefetch_budget,
                  "MoE expert streaming: bytes per token read ahead on router guesses below the "
                  "probability threshold whose rank has proven right often enough, e.g. 160M "
                  "(0: none; default: what the disk reads while a token computes, from the plan)");
  app.add_option("--expert-prefetch-precision", flags->expert_prefetch_precision,
                 "MoE expert streaming: how often guesses of a rank must have been right for "
                 "that budget to read them (0..1, default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--no-expert-cancel", flags->no_expert_cancel,
               "MoE expert streaming: let a read-ahead expert that its layer did not route to "
               "finish reading instead of dropping what is not yet issued");
  app.add_option("--simd", flags->simd,
                 "the CPU kernels' instruction set: scalar, avx2, avx512, avx512vnni or amx (a "
                 "level this CPU lacks falls back to the best below it; default: the best)")
      ->check(CLI::IsMember({"scalar", "avx2", "avx512", "avx512vnni", "amx"}));
  app.add_flag("--no-cuda-graphs", flags->no_cuda_graphs,
               "run every GPU decode step eagerly instead of replaying CUDA graphs (for "
               "profilers that time kernels one by one)");
}

void add_spec_flags(CLI::App& app, SpecFlags* flags) {
  CLI::Option* lookup =
      app.add_flag("--lookup", flags->lookup,
                   "speculative decoding with guesses from the context's own n-grams (prompt "
                   "lookup): faster where the reply repeats its input, the same output");
  app.add_option("--draft", flags->draft,
                 "speculative decoding with guesses from this small model of the same vocabulary "
                 "(loaded resident; its memory comes out of the budgets)")
      ->check(CLI::ExistingFile)
      ->excludes(lookup);
  app.add_option("--spec-max", flags->spec_max,
                 "speculative decoding: the most guesses one pass verifies (fewer where they do "
                 "not pay)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--spec-side", flags->spec_side,
                 "speculative decoding: the most guesses off the main branch, a draft "
                 "tree's second choices (fewer where they do not pay; 0: a chain)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
}

runtime::SpeculationOptions speculation_options(const SpecFlags& flags) {
  runtime::SpeculationOptions o;
  o.lookup = flags.lookup;
  o.draft_model = !flags.draft.empty();
  o.max_draft = flags.spec_max;
  o.max_side = flags.spec_side;
  return o;
}

runtime::EngineOptions engine_options(const EngineFlags& flags, const std::string& model_path,
                                      int64_t n_ctx) {
  runtime::EngineOptions eo;
  eo.model_path = model_path;
  eo.n_threads = flags.threads;
  eo.device = flags.device;
  eo.n_ctx = n_ctx;
  eo.kv_f32 = flags.kv_type == "f32";
  eo.ram_budget = flags.ram_budget;
  eo.gpu_budget = flags.vram_budget;
  eo.gpu_layers = flags.gpu_layers;
  eo.cpu_moe_layers = flags.cpu_moe_layers;
  eo.profile_path = flags.profile;
  eo.expert_predictor = flags.expert_predictor;
  eo.expert_lookahead = flags.expert_lookahead;
  eo.expert_prefetch_budget = flags.expert_prefetch_budget;
  eo.expert_prefetch_precision = flags.expert_prefetch_precision;
  eo.expert_cancel = !flags.no_expert_cancel;
  eo.simd = flags.simd;
  eo.cuda_graphs = !flags.no_cuda_graphs;
  return eo;
}

int run_cli(int argc, char** argv) {
  // Logs go to stderr so stdout carries only generated text and --json output.
  spdlog::set_default_logger(spdlog::stderr_color_mt("hypura"));
  spdlog::set_pattern("%^[%l]%$ %v");
  if (const char* level = std::getenv("HYPURA_LOG")) {
    spdlog::set_level(spdlog::level::from_str(level));
  }
  CLI::App app{"hypura: run quantized GGUF models across GPU, RAM and NVMe"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hypura 0.1.0");

  auto& registry = command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const CommandSpec& a, const CommandSpec& b) { return a.order < b.order; });
  std::function<int()> action;
  for (auto& spec : registry) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.description);
    auto run = spec.setup(*sub);
    sub->callback([&action, run] { action = run; });
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return action ? action() : 1;
}

}  // namespace hypura::cli
