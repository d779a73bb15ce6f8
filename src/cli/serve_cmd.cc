// `hypura serve [MODEL]`: an Ollama-compatible HTTP server, plus OpenAI-style endpoints.
//
// Loads the model once (through the same Engine as `hypura run`, in whichever mode the
// planner picks) and serves it until SIGINT/SIGTERM, which stop it gracefully (exit 0).
// The API, limits and client setup are in docs/SERVER.md; the HTTP layer in src/server.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "gguf/gguf.h"
#include "runtime/session.h"
#include "server/host_policy.h"
#include "server/http_server.h"
#include "server/model_info.h"
#include "server/stop_signals.h"

namespace hypura::cli {
namespace {

// ", app://, file://, ...": the schemes the server allows by default, for --help.
std::string app_schemes() {
  std::string out;
  for (std::string_view scheme : server::kAppOriginSchemes) out += ", " + std::string(scheme);
  return out;
}

struct ServeArgs {
  std::string model;
  std::string alias;
  server::ServerOptions server;
  int64_t context = 4096;
  int parallel = 0;  // --parallel (0: from memory)
  EngineFlags engine;
  SpecFlags spec;
};

int run_serve(ServeArgs a) {
  const std::string path = resolve_model_path(a.model);
  if (path.empty()) {
    std::cerr << "hypura serve: no model given and no default model in test-models/ "
                 "(run scripts/fetch-models.sh)\n";
    return 2;
  }
  runtime::EngineOptions eo = engine_options(a.engine, path, a.context);
  eo.n_parallel = a.parallel;  // 0: the plan's default from memory
  eo.draft_model = a.spec.draft;
  const auto t0 = std::chrono::steady_clock::now();
  auto engine = runtime::Engine::load(eo);
  if (!engine.is_ok()) {
    std::cerr << "hypura serve: " << path << ": " << engine.status().message() << "\n";
    return 1;
  }
  runtime::Engine& e = **engine;
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  server::ModelInfo info = server::model_info_from_gguf(e.file(), path, a.alias, e.n_ctx());
  info.mode = e.mode();
  server::ServerOptions options = a.server;
  options.parallel = e.n_parallel();
  options.speculation = speculation_options(a.spec);
  server::HttpServer http(e, info, options);
  if (Status st = http.bind(); !st.is_ok()) {
    std::cerr << "hypura serve: " << st.message() << "\n";
    return 1;
  }
  spdlog::info("loaded {} ({}, {}, context {}, {} parallel) in {:.2f} s", path, e.architecture(),
               e.mode(), e.n_ctx(), options.parallel, load_s);
  spdlog::info("serving \"{}\" on http://{}:{} (Ollama API at /api, OpenAI API at /v1)", info.name,
               a.server.host, http.port());
  std::fflush(stdout);
  return server::serve_until_stopped(http);
}

std::function<int()> setup_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  app.add_option("model", a->model,
                 "GGUF file or pulled model (hypura list); default: the default test model");
  add_models_dir_option(app, &a->server.models_dir);
  app.add_option("--hf-endpoint", a->server.hf_endpoint,
                 "the Hugging Face Hub /api/pull resolves hf.co names at (a mirror)");
  app.add_option("--host", a->server.host, "address to listen on")->capture_default_str();
  app.add_option("--port", a->server.port, "port (11434 is Ollama's; 0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  add_context_option(app, &a->context);
  app.add_option("--max-queue", a->server.max_queue,
                 "requests that may wait behind the running one; more get 503")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--parallel", a->parallel,
                 "requests generated at once, in shared forward passes (each keeps a KV cache of "
                 "--context); 0: as many as a quarter of the memory holds, up to 4 (a model "
                 "wholly in VRAM: half of the free VRAM, up to 16)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--max-body", a->server.max_body_bytes,
                 "largest request body in bytes; larger ones get 400")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--max-connections", a->server.connections.max_connections,
                 "connections served at once (at least --max-queue + 9); idle and slow ones "
                 "make way for new ones, and beyond that new ones get 503")
      ->check(CLI::Range(size_t{1}, size_t{4096}))
      ->capture_default_str();
  app.add_option("--allow-host", a->server.allowed_hosts,
                 "also answer requests whose Host is NAME (repeatable; '*': any). Default: IP "
                 "addresses, localhost and --host");
  app.add_option("--allow-origin", a->server.allowed_origins,
                 "also answer browsers (with CORS headers) from origins matching PATTERN, e.g. "
                 "https://app.example or https://*.example.com (repeatable; '*': any). Default: "
                 "http(s) pages on localhost and --host" +
                     app_schemes());
  app.add_option("--alias", a->alias, "model name to serve under (default: the file name)");
  add_engine_flags(app, &a->engine);
  add_spec_flags(app, &a->spec);
  return [a] { return run_serve(*a); };
}

const Registrar kRegistrar({"serve", "Ollama-compatible HTTP server (plus OpenAI-style /v1)", 50,
                            setup_serve});

}  // namespace
}  // namespace hypura::cli
