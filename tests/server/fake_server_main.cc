// hypura_fake_server: the real HTTP server over the fake engine (deterministic tokens, a
// fixed delay per token), so the client tests in this folder can exercise the protocol,
// concurrency, disconnects and shutdown quickly and without a model file.
//
//   hypura_fake_server [--port 0] [--token-delay-ms 5] [--n-ctx 256] [--max-queue 16]
//                      [--max-body BYTES] [--eos 1]
// --eos 0: answers run until num_predict or the context ends them (a long answer to stop).
// Prints the same "serving ... on http://HOST:PORT" line as `hypura serve`.
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "server/api_response.h"
#include "server/http_server.h"
#include "server/stop_signals.h"
#include "server/testing/fake_engine.h"

int main(int argc, char** argv) {
  using namespace hypura::server;
  spdlog::set_pattern("%^[%l]%$ %v");
  testing::FakeConfig config;
  config.token_delay = std::chrono::milliseconds(5);
  ServerOptions options;
  options.port = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (flag == "--port")
      options.port = static_cast<int>(value);
    else if (flag == "--token-delay-ms")
      config.token_delay = std::chrono::milliseconds(value);
    else if (flag == "--n-ctx")
      config.n_ctx = value;
    else if (flag == "--max-queue")
      options.max_queue = static_cast<size_t>(value);
    else if (flag == "--max-body")
      options.max_body_bytes = static_cast<size_t>(value);
    else if (flag == "--eos")
      config.eos = value != 0;
    else {
      spdlog::error("unknown flag {}", flag);
      return 2;
    }
  }
  testing::FakeEngine engine(config);
  ModelInfo info;
  info.name = "fake:latest";
  info.family = "fake";
  info.parameter_size = "1K";
  info.quantization_level = "F32";
  info.context_length = config.n_ctx;
  info.model_info = {{"general.architecture", "fake"}, {"fake.context_length", config.n_ctx}};
  info.chat_template = "<|role|>content";
  info.modified_at = now_rfc3339();
  HttpServer server(engine, info, options);
  if (auto st = server.bind(); !st.is_ok()) {
    spdlog::error("{}", st.message());
    return 1;
  }
  spdlog::info("serving \"{}\" on http://{}:{} (Ollama API at /api, OpenAI API at /v1)", info.name,
               options.host, server.port());
  std::fflush(stdout);
  return serve_until_stopped(server);
}
