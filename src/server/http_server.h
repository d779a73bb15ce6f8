// HttpServer: `hypura serve`'s HTTP front, Ollama's API plus OpenAI-style endpoints.
//
//   GET/HEAD /                 "Hypura is running" (plain text)
//   GET  /api/version          {"version"}
//   GET  /api/tags, /api/ps    the one loaded model
//   POST /api/show             details, model_info (GGUF metadata), template, parameters
//   POST /api/generate         prompt -> NDJSON stream (or one object with stream: false)
//   POST /api/chat             messages -> NDJSON stream (or one object)
//   POST /v1/chat/completions  OpenAI chat (SSE with stream: true)
//   POST /v1/completions       OpenAI completion (raw prompt)
//   GET  /v1/models[/{id}]     the one model
//
// Request flow: an HTTP thread parses and validates the body (400 on any error, 404 for
// another model's name), renders and tokenizes the prompt (400 if it cannot fit), and
// queues a Job with the GenerationWorker (503 when the queue is full), whose `parallel`
// slots generate up to that many requests at once in shared forward passes. It then writes the
// job's pieces as they come. Between pieces it checks that the client is still there; if
// not, it cancels the job, which stops at its next token. Non-streaming responses are sent
// chunked too, so the same check covers them (the status line is sent only after every
// check that can fail has passed).
//
// Limits (ServerOptions; docs/SERVER.md "HTTP limits"): body size (default 4 MiB: 400
// beyond), queue depth (default 16 waiting requests: 503 beyond), connections, header
// size and timeouts (ConnectionLimits, enforced by GuardedServer: connection_guard.h),
// JSON nesting (api_request.h), and the Host / Origin policy (host_policy.h: 403).
// HTTP threads: max_connections, at least one per request that can be in flight (queue +
// parallel running) plus a few for listings, created at start.
//
// Thread-safety: run() blocks on one thread; shutdown() may be called from any thread
// (a signal-watching thread, a test). The Engine must outlive the server.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/session.h"
#include "server/connection_guard.h"
#include "server/model_info.h"

namespace hypura::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                           // 0: any free port (tests)
  size_t max_queue = 16;                     // requests waiting behind the running ones
  int parallel = 1;                          // requests generated at once (one batch)
  size_t max_body_bytes = 4u << 20;          // larger request bodies get 400
  ConnectionLimits connections;              // raised to max_queue + 9 connections if lower
  std::vector<std::string> allowed_hosts;    // --allow-host: more Host names ("*": any)
  std::vector<std::string> allowed_origins;  // --allow-origin: more Origins ("*": any)
  std::string models_dir;                    // /api/pull's folder ("": ModelStore::default_dir)
  std::string hf_endpoint = "https://huggingface.co";  // where /api/pull resolves hf.co names
  runtime::SpeculationOptions speculation;  // --lookup, --draft, --spec-max: every request's
};

class HttpServer {
 public:
  HttpServer(runtime::Engine& engine, ModelInfo info, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket. kIoError when the address is taken or invalid.
  Status bind();
  int port() const;  // the bound port (after bind())
  // Connections whose request is being served (headers read): for tests and stats.
  size_t busy_connections() const;

  // Serves until shutdown(). REQUIRES: bind() succeeded.
  void run();

  // Stops accepting, cancels queued and running generations (clients get an error line
  // or a 503), waits for in-flight responses to end, and makes run() return. Idempotent.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hypura::server
