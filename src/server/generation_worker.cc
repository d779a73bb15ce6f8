#include "server/generation_worker.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace hypura::server {

namespace {
constexpr const char* kShuttingDown = "server is shutting down";

runtime::GenerateResult result_with_reason(const char* reason) {
  runtime::GenerateResult r;
  r.done_reason = reason;
  return r;
}
runtime::GenerateResult cancelled_result() {
  return result_with_reason("cancelled");
}
}  // namespace

GenerationWorker::GenerationWorker(runtime::Engine& engine, size_t max_queue, int parallel)
    : engine_(engine), queue_(max_queue) {
  for (int i = 0; i < std::max(parallel, 1); ++i) {
    auto slot = std::make_unique<Slot>();
    slot->session = engine.new_session();
    slot->context.store(slot->session->n_ctx());
    slots_.push_back(std::move(slot));
  }
  for (auto& slot : slots_) slot->thread = std::thread([this, s = slot.get()] { run_slot(*s); });
  dispatcher_ = std::thread([this] { dispatch(); });
}

GenerationWorker::~GenerationWorker() {
  shutdown();
}

Status GenerationWorker::submit(std::shared_ptr<Job> job) {
  return queue_.push(std::move(job));
}

int64_t GenerationWorker::context() const {
  int64_t n = 0;
  for (const auto& slot : slots_) n = std::max(n, slot->context.load());
  return n;
}

void GenerationWorker::shutdown() {
  std::call_once(shutdown_once_, [this] {
    for (auto& job : queue_.close()) {
      job->cancel(kShuttingDown);
      job->finish(cancelled_result());
    }
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (auto& slot : slots_) {
        if (slot->job) slot->job->cancel(kShuttingDown);
      }
    }
    cv_.notify_all();
    if (dispatcher_.joinable()) dispatcher_.join();
    for (auto& slot : slots_) {
      if (slot->thread.joinable()) slot->thread.join();
    }
  });
}

// Waits for an idle slot, then for a job, and hands the job to the best idle slot. The
// queue's bound stays exact: a job leaves it only when a slot can start it.
void GenerationWorker::dispatch() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ ||
               std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return !s->job; });
      });
      if (stopping_) return;
    }
    std::shared_ptr<Job> job = queue_.pop();
    if (!job) return;  // closed
    std::unique_lock lock(mu_);
    if (!job->is_embed() && job->prompt().empty()) {  // an unload: when every slot is idle
      cv_.wait(lock, [&] {
        return stopping_ ||
               std::all_of(slots_.begin(), slots_.end(), [](const auto& s) { return !s->job; });
      });
      if (!stopping_) unload_idle();
      job->mark_started();
      job->finish(result_with_reason(stopping_ ? "cancelled" : "unload"));
      continue;
    }
    if (stopping_) {
      job->cancel(kShuttingDown);
      job->finish(cancelled_result());
      return;
    }
    best_idle_slot(*job)->job = std::move(job);
    cv_.notify_all();
  }
}

// The idle slot whose cache holds the longest prefix of the job's tokens; on a tie a
// loaded one before an unloaded one, then the lowest index (embeddings: any).
GenerationWorker::Slot* GenerationWorker::best_idle_slot(const Job& job) {
  Slot* best = nullptr;
  int64_t best_prefix = -2;  // below an unloaded slot's -1
  for (auto& slot : slots_) {
    if (slot->job) continue;
    int64_t prefix = slot->session ? 0 : -1;
    if (slot->session && !job.is_embed()) prefix = slot->session->cached_prefix(job.prompt());
    if (prefix > best_prefix) {
      best = slot.get();
      best_prefix = prefix;
    }
  }
  return best;
}

void GenerationWorker::run_slot(Slot& slot) {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || slot.job != nullptr; });
      if (!slot.job) return;  // stopping with nothing to serve
      job = slot.job;
    }
    Result<runtime::GenerateResult> result = serve(slot, *job);
    {
      std::lock_guard lock(mu_);
      slot.job.reset();
      cv_.notify_all();
    }
    // Answered once the slot is idle: the client's next request finds it, and its cache.
    job->finish(std::move(result));
  }
}

Result<runtime::GenerateResult> GenerationWorker::serve(Slot& slot, Job& job) {
  job.mark_started();
  if (job.cancelled()) return cancelled_result();  // the client left while the job waited
  Result<runtime::GenerateResult> result = job.is_embed() ? embed(slot, job) : generate(slot, job);
  if (job.unload()) {
    unload(slot);
    std::lock_guard lock(mu_);
    unload_idle();
  }
  return result;
}

Status GenerationWorker::ensure_session(Slot& slot, int64_t n_ctx) {
  if (!slot.session) {
    std::lock_guard loading(load_mu_);
    HYPURA_RETURN_IF_ERROR(fit_host_memory());
    slot.session = engine_.new_session();
    slot.context.store(slot.session->n_ctx());
    spdlog::info("model loaded again (context {})", slot.session->n_ctx());
  }
  Status st = slot.session->reserve_context(n_ctx);
  slot.context.store(slot.session->n_ctx());
  return st;
}

// A host memory limit lowered below what the plan holds (a container resized) re-plans
// the weights once no slot holds a session; while one does, the request is refused.
Status GenerationWorker::fit_host_memory() {
  const Status held = engine_.check_host_memory();
  if (held.is_ok()) return held;
  const bool in_use = std::any_of(slots_.begin(), slots_.end(),
                                  [](const auto& s) { return s->context.load() > 0; });
  if (in_use) {
    return held.with_context(
        "not loading the model again while other requests hold their caches (it is planned "
        "again once every one is unloaded)");
  }
  spdlog::warn("{}: planning again", held.message());
  return engine_.replan().with_context(held.message() + "; planning again");
}

// Each input from position 0 of the slot's KV cache (a chat's cached prefix is lost, and
// the next turn processes its prompt again); cancellation is checked between inputs.
Result<runtime::GenerateResult> GenerationWorker::embed(Slot& slot, Job& job) {
  HYPURA_RETURN_IF_ERROR(ensure_session(slot, job.context()));
  std::vector<std::vector<float>> out(job.embed_inputs().size());
  runtime::GenerateResult r;
  r.done_reason = "stop";
  const auto t0 = Clock::now();
  for (size_t i = 0; i < out.size(); ++i) {
    if (job.cancelled()) return cancelled_result();
    HYPURA_RETURN_IF_ERROR(slot.session->embed(job.embed_inputs()[i], job.pooling(), &out[i]));
    r.prompt_tokens += static_cast<int>(job.embed_inputs()[i].size());
  }
  r.prompt_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  job.set_embeddings(std::move(out));
  return r;
}

Result<runtime::GenerateResult> GenerationWorker::generate(Slot& slot, Job& job) {
  HYPURA_RETURN_IF_ERROR(ensure_session(slot, job.context()));
  auto on_piece = [&job](std::string_view piece) {
    job.push_piece(piece);
    return !job.cancelled();
  };
  Result<runtime::GenerateResult> result =
      slot.session->generate(job.prompt(), job.options(), on_piece);
  if (!result.is_ok()) {
    // The KV cache may hold a half-processed prompt; start the next request clean.
    spdlog::warn("generation failed: {}", result.status().message());
    slot.session->reset();
  } else if (job.cancelled()) {
    result->done_reason = "cancelled";
  }
  return result;
}

void GenerationWorker::unload(Slot& slot) {
  if (!slot.session) return;
  slot.session.reset();
  slot.context.store(0);
  spdlog::info("model unloaded (keep_alive 0): its KV cache is freed");
}

void GenerationWorker::unload_idle() {
  for (auto& slot : slots_) {
    if (!slot->job) unload(*slot);
  }
}

}  // namespace hypura::server
