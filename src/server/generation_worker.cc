#include "server/generation_worker.h"

#include <spdlog/spdlog.h>

namespace hypura::server {

namespace {
constexpr const char* kShuttingDown = "server is shutting down";

runtime::GenerateResult cancelled_result() {
  runtime::GenerateResult r;
  r.done_reason = "cancelled";
  return r;
}
}  // namespace

GenerationWorker::GenerationWorker(runtime::Engine& engine, size_t max_queue)
    : session_(engine.new_session()), queue_(max_queue), thread_([this] { run(); }) {}

GenerationWorker::~GenerationWorker() { shutdown(); }

Status GenerationWorker::submit(std::shared_ptr<Job> job) { return queue_.push(std::move(job)); }

void GenerationWorker::shutdown() {
  std::call_once(shutdown_once_, [this] {
    for (auto& job : queue_.close()) {
      job->cancel(kShuttingDown);
      job->finish(cancelled_result());
    }
    {
      std::lock_guard lock(running_mu_);
      if (running_) running_->cancel(kShuttingDown);
    }
    if (thread_.joinable()) thread_.join();
  });
}

void GenerationWorker::run() {
  while (std::shared_ptr<Job> job = queue_.pop()) {
    {
      std::lock_guard lock(running_mu_);
      running_ = job;
    }
    serve(*job);
    std::lock_guard lock(running_mu_);
    running_.reset();
  }
}

void GenerationWorker::serve(Job& job) {
  job.mark_started();
  if (job.cancelled()) {  // the client left while the job waited
    job.finish(cancelled_result());
    return;
  }
  auto on_piece = [&job](std::string_view piece) {
    job.push_piece(piece);
    return !job.cancelled();
  };
  Result<runtime::GenerateResult> result = session_->generate(job.prompt(), job.options(), on_piece);
  if (!result.is_ok()) {
    // The KV cache may hold a half-processed prompt; start the next request clean.
    spdlog::warn("generation failed: {}", result.status().message());
    session_->reset();
  } else if (job.cancelled()) {
    result->done_reason = "cancelled";
  }
  job.finish(std::move(result));
}

}  // namespace hypura::server
