// GenerationWorker: the threads that run the model for the server.
//
// One model is loaded; `parallel` slots each hold a Session (a KV cache) and a thread.
// Requests wait in a FairQueue; a dispatcher thread takes the next job whenever a slot is
// idle and gives it to the idle slot whose cache holds the longest prefix of the job's
// tokens (a conversation's next turn goes back to the slot that served the last one, and
// reuses its KV cache), then the slot grows its session's context to the job's window
// when needed, runs Session::generate and streams its pieces into the Job. Slots that
// generate at once share the engine's forward passes (continuous batching,
// runtime/step_batcher.h): one read of the weights per step for every active request, and
// a request that ends or is cancelled leaves the batch at its next step.
//
// Unloading (keep_alive 0) drops the Sessions of the slot that served the job and of
// every idle slot (their KV caches); the next job creates a new one ("loads" again). An
// unload-only request waits for every slot to be idle. The weights belong to the Engine
// and stay loaded, unless the host memory limit was lowered below what their plan holds
// (a container resized): then the first load after every slot is unloaded re-plans them
// (Engine::replan), and loads before that are refused.
//
// Thread-safety: submit() and shutdown() may be called from any thread. A slot's Session
// is touched by its own thread while it serves a job, otherwise (unloading) under the
// worker's mutex. Ownership: the worker owns its Sessions and threads; the Engine must
// outlive the worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "runtime/session.h"
#include "server/fair_queue.h"
#include "server/job.h"

namespace hypura::server {

class GenerationWorker {
 public:
  // REQUIRES: parallel >= 1.
  GenerationWorker(runtime::Engine& engine, size_t max_queue, int parallel = 1);
  ~GenerationWorker();  // shutdown() and join
  GenerationWorker(const GenerationWorker&) = delete;
  GenerationWorker& operator=(const GenerationWorker&) = delete;

  // Queues a job. kResourceExhausted when the queue is full (503), kCancelled after
  // shutdown.
  Status submit(std::shared_ptr<Job> job);

  // Stops taking jobs, cancels the waiting ones and the running ones (each finishes with
  // done_reason "cancelled" at its next token), and joins the threads. Idempotent.
  void shutdown();

  size_t queued() const { return queue_.size(); }
  int parallel() const { return static_cast<int>(slots_.size()); }
  // Whether a session is loaded, and the largest context window of the loaded ones (0
  // when none is).
  bool loaded() const { return context() > 0; }
  int64_t context() const;

 private:
  struct Slot {
    std::unique_ptr<runtime::Session> session;  // null while unloaded
    std::atomic<int64_t> context{0};            // session->n_ctx(), 0 while unloaded
    std::shared_ptr<Job> job;                   // the job it serves; null: idle (mu_)
    std::thread thread;
  };
  void dispatch();
  void run_slot(Slot& slot);
  Slot* best_idle_slot(const Job& job);                         // REQUIRES: mu_ held, an idle slot
  Result<runtime::GenerateResult> serve(Slot& slot, Job& job);  // the job's answer
  Result<runtime::GenerateResult> generate(Slot& slot, Job& job);
  Result<runtime::GenerateResult> embed(Slot& slot, Job& job);
  Status ensure_session(Slot& slot, int64_t n_ctx);
  Status fit_host_memory();  // REQUIRES: load_mu_ held
  void unload(Slot& slot);
  void unload_idle();  // REQUIRES: mu_ held

  runtime::Engine& engine_;
  FairQueue queue_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;
  // Held while a slot makes its Session: a re-plan sees every slot's (Slot::context).
  std::mutex load_mu_;
  std::condition_variable cv_;  // a slot became idle or got a job; shutting down
  bool stopping_ = false;
  std::once_flag shutdown_once_;
  std::thread dispatcher_;
};

}  // namespace hypura::server
