// Subcommand registry of the `hypura` binary.
//
// Each subcommand lives in its own <name>_cmd.cc and registers itself with a static
// Registrar, so adding a command touches no other file. The sources are compiled
// straight into the executable (not a static library) so the registrars are kept.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "store/model_store.h"

namespace hypura::cli {

// Adds the subcommand's options to `app` and returns the action to run when it is chosen.
// The action returns the process exit code. Option storage must outlive setup: keep it in
// a shared_ptr captured by the returned action.
using CommandSetup = std::function<std::function<int()>(CLI::App& app)>;

struct CommandSpec {
  std::string name;
  std::string description;
  int order;  // position in --help
  CommandSetup setup;
};

std::vector<CommandSpec>& command_registry();

// Parses the command line and runs the subcommand; main() of the hypura binary (and of the
// test build's hypura_faulty, testing/faulty_main.cc).
int run_cli(int argc, char** argv);

struct Registrar {
  explicit Registrar(CommandSpec spec) { command_registry().push_back(std::move(spec)); }
};

// Resolves the model argument of run/bench/serve/inspect: an explicit path, a model `hypura
// pull` downloaded (by its name, e.g. hf.co/ORG/REPO:QUANT), or the default test model
// (test-models/, see docs/MODELS.md) when empty. Returns "" when none exists.
std::string resolve_model_path(const std::string& arg);

// --models-dir DIR of pull, list, rm and serve (default: ModelStore::default_dir()).
CLI::Option* add_models_dir_option(CLI::App& app, std::string* dir);

// --ram-budget SIZE (e.g. 3G, 2.5GiB): a cap on host memory for the planner and the memory
// ledger; a model that does not fit under it streams. A malformed size is a usage error.
// run, bench and serve share it; *bytes stays 0 (the profile's usable RAM) when absent.
CLI::Option* add_ram_budget_option(CLI::App& app, uint64_t* bytes);
// --vram-budget SIZE: a cap on GPU memory (the GPU tier's share of the model).
CLI::Option* add_vram_budget_option(CLI::App& app, uint64_t* bytes);

// --profile FILE: plan with this hardware profile (`hypura profile --json` output) instead
// of the cached one or a fresh measurement: reproducible plans, and no storage benchmark.
CLI::Option* add_profile_option(CLI::App& app, std::string* path);

// -t,--threads N: compute threads, 0 (the default) for the physical cores. Capped at
// kMaxThreads: `run -t 100000` used to abort creating the pool; now it is a usage error.
constexpr int kMaxThreads = 1024;
CLI::Option* add_threads_option(CLI::App& app, int* threads);

// --device auto|cpu|cuda of run, bench and serve (runtime/device_choice.h): where the
// forward pass runs; auto (the default) takes the GPU when the whole model fits there.
CLI::Option* add_device_option(CLI::App& app, std::string* device);

// Largest --context accepted (16M tokens): the KV cache of anything larger cannot be
// allocated on any machine, and the planner's size arithmetic stays far from overflow.
constexpr int64_t kMaxContextTokens = int64_t{1} << 24;

// -c,--context N of run and serve: context length in tokens, 1..kMaxContextTokens.
CLI::Option* add_context_option(CLI::App& app, int64_t* n_ctx);

// The options of every command that loads a model (run, bench, serve, perplexity):
// -t/--threads, --device, --kv-type f16|f32, --ram-budget, --vram-budget, --profile, and expert
// streaming's
// --expert-predictor none|coact|router|both, --expert-lookahead N, --expert-prefetch-budget
// SIZE, --expert-prefetch-precision P and --no-expert-cancel (docs/MOE.md).
// engine_options() makes the
// Engine's options of them, so the four load (and plan) a model the same way.
struct EngineFlags {
  int threads = 0;
  std::string device = "auto";  // --device auto|cpu|cuda
  std::string kv_type = "f16";
  uint64_t ram_budget = 0;                       // 0: the profile's usable memory
  uint64_t vram_budget = 0;                      // 0: the GPU's free memory less a reserve
  int gpu_layers = -1;                           // --gpu-layers N; -1: as many as fit
  int cpu_moe_layers = -1;                       // --cpu-moe-layers N; -1: as the budget decides
  std::string profile;                           // --profile FILE
  std::string expert_predictor;                  // --expert-predictor; empty: the default (both)
  int expert_lookahead = 0;                      // --expert-lookahead 1..4; 0: the default (1)
  uint64_t expert_prefetch_budget = UINT64_MAX;  // --expert-prefetch-budget; MAX: the plan's
  double expert_prefetch_precision = -1;         // --expert-prefetch-precision; < 0: default
  bool no_expert_cancel = false;                 // --no-expert-cancel
  std::string simd;                              // --simd LEVEL; empty: the best this CPU runs
  bool no_cuda_graphs = false;                   // --no-cuda-graphs
};
void add_engine_flags(CLI::App& app, EngineFlags* flags);
runtime::EngineOptions engine_options(const EngineFlags& flags, const std::string& model_path,
                                      int64_t n_ctx);

// Speculative decoding of run, bench and serve (docs/SPECULATIVE.md): --lookup (guesses
// from the context's own n-grams), --draft MODEL (from a small model of the same
// vocabulary), --spec-max K (the most guesses a pass verifies on its main branch),
// --spec-side N (the most off it: a draft tree, on the CPU). --lookup and --draft
// exclude each other.
struct SpecFlags {
  bool lookup = false;
  std::string draft;  // the draft model's path; empty: none
  int spec_max = 8;
  int spec_side = 4;
};
void add_spec_flags(CLI::App& app, SpecFlags* flags);
runtime::SpeculationOptions speculation_options(const SpecFlags& flags);

}  // namespace hypura::cli
