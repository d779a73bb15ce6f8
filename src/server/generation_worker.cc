#include "server/generation_worker.h"

#include <spdlog/spdlog.h>

namespace hypura::server {

namespace {
constexpr const char* kShuttingDown = "server is shutting down";

runtime::GenerateResult result_with_reason(const char* reason) {
  runtime::GenerateResult r;
  r.done_reason = reason;
  return r;
}
runtime::GenerateResult cancelled_result() { return result_with_reason("cancelled"); }
}  // namespace

GenerationWorker::GenerationWorker(runtime::Engine& engine, size_t max_queue)
    : engine_(engine), session_(engine.new_session()), context_(session_->n_ctx()),
      queue_(max_queue), thread_([this] { run(); }) {}

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
  if (!job.is_embed() && job.prompt().empty()) {  // only an unload
    unload();
    job.finish(result_with_reason("unload"));
    return;
  }
  Result<runtime::GenerateResult> result = job.is_embed() ? embed(job) : generate(job);
  if (job.unload()) unload();
  job.finish(std::move(result));
}

Status GenerationWorker::ensure_session(int64_t n_ctx) {
  if (!session_) {
    session_ = engine_.new_session();
    spdlog::info("model loaded again (context {})", session_->n_ctx());
  }
  Status st = session_->reserve_context(n_ctx);
  context_.store(session_->n_ctx());
  return st;
}

// Each input from position 0 of the one KV cache (a chat's cached prefix is lost, and
// the next turn processes its prompt again); cancellation is checked between inputs.
Result<runtime::GenerateResult> GenerationWorker::embed(Job& job) {
  HYPURA_RETURN_IF_ERROR(ensure_session(job.context()));
  std::vector<std::vector<float>> out(job.embed_inputs().size());
  runtime::GenerateResult r;
  r.done_reason = "stop";
  const auto t0 = Clock::now();
  for (size_t i = 0; i < out.size(); ++i) {
    if (job.cancelled()) return cancelled_result();
    HYPURA_RETURN_IF_ERROR(session_->embed(job.embed_inputs()[i], job.pooling(), &out[i]));
    r.prompt_tokens += static_cast<int>(job.embed_inputs()[i].size());
  }
  r.prompt_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  job.set_embeddings(std::move(out));
  return r;
}

Result<runtime::GenerateResult> GenerationWorker::generate(Job& job) {
  HYPURA_RETURN_IF_ERROR(ensure_session(job.context()));
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
  return result;
}

void GenerationWorker::unload() {
  if (!session_) return;
  session_.reset();
  context_.store(0);
  spdlog::info("model unloaded (keep_alive 0): its KV cache is freed");
}

}  // namespace hypura::server
