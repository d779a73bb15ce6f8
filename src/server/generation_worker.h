// GenerationWorker: the one thread that runs the model for the server.
//
// One model is loaded and one Session (one KV cache) serves every request in turn, so a
// conversation's next turn reuses the KV cache of its longest matching token prefix (the
// Session does the matching; the worker always feeds full token sequences). Requests wait
// in a FairQueue; the worker pops a job, grows the session's context to the job's
// window when needed, runs Session::generate and streams its pieces into the Job.
//
// Unloading (keep_alive 0) drops the Session (its KV cache and scratch); the next job
// creates a new one ("loads" again). The weights belong to the Engine and stay loaded.
//
// Thread-safety: submit() and shutdown() may be called from any thread. The Session is
// touched only by the worker thread. Ownership: the worker owns its Session and thread;
// the Engine must outlive the worker.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>

#include "common/status.h"
#include "runtime/session.h"
#include "server/fair_queue.h"
#include "server/job.h"

namespace hypura::server {

class GenerationWorker {
 public:
  GenerationWorker(runtime::Engine& engine, size_t max_queue);
  ~GenerationWorker();  // shutdown() and join
  GenerationWorker(const GenerationWorker&) = delete;
  GenerationWorker& operator=(const GenerationWorker&) = delete;

  // Queues a job. kResourceExhausted when the queue is full (503), kCancelled after
  // shutdown.
  Status submit(std::shared_ptr<Job> job);

  // Stops taking jobs, cancels the waiting ones and the running one (each finishes with
  // done_reason "cancelled" at its next token), and joins the thread. Idempotent.
  void shutdown();

  size_t queued() const { return queue_.size(); }
  // Whether a session is loaded, and its context window (0 when unloaded).
  bool loaded() const { return context_.load() > 0; }
  int64_t context() const { return context_.load(); }

 private:
  void run();
  void serve(Job& job);
  Result<runtime::GenerateResult> generate(Job& job);
  Result<runtime::GenerateResult> embed(Job& job);
  Status ensure_session(int64_t n_ctx);
  void unload();

  runtime::Engine& engine_;
  std::unique_ptr<runtime::Session> session_;  // null while unloaded
  std::atomic<int64_t> context_{0};            // session_->n_ctx(), 0 while unloaded
  FairQueue queue_;
  std::mutex running_mu_;
  std::shared_ptr<Job> running_;  // guarded by running_mu_
  std::once_flag shutdown_once_;
  std::thread thread_;
};

}  // namespace hypura::server
