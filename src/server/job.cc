#include "server/job.h"

namespace hypura::server {

Job::Job(std::string client, std::vector<int32_t> prompt, runtime::GenerateOptions options)
    : client_(std::move(client)),
      prompt_(std::move(prompt)),
      options_(std::move(options)),
      received_(Clock::now()),
      started_(received_),
      finished_(received_) {
  options_.cancel = &cancel_;
}

void Job::cancel(std::string reason) {
  std::lock_guard lock(mu_);
  if (!cancel_.load()) cancel_reason_ = std::move(reason);
  cancel_.store(true);
}

std::string Job::cancel_reason() const {
  std::lock_guard lock(mu_);
  return cancel_reason_;
}

void Job::mark_started() {
  std::lock_guard lock(mu_);
  started_ = Clock::now();
}

void Job::push_piece(std::string_view piece) {
  {
    std::lock_guard lock(mu_);
    pending_.emplace_back(piece);
  }
  cv_.notify_all();
}

void Job::set_embeddings(std::vector<std::vector<float>> embeddings) {
  std::lock_guard lock(mu_);
  embeddings_ = std::move(embeddings);
}

std::vector<std::vector<float>> Job::take_embeddings() {
  std::lock_guard lock(mu_);
  return std::move(embeddings_);
}

void Job::finish(Result<runtime::GenerateResult> result) {
  {
    std::lock_guard lock(mu_);
    result_ = std::move(result);
    finished_ = Clock::now();
    done_ = true;
  }
  cv_.notify_all();
}

Job::Update Job::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return done_ || !pending_.empty(); });
  Update update;
  update.pieces.swap(pending_);
  update.done = done_;
  return update;
}

Clock::time_point Job::started() const {
  std::lock_guard lock(mu_);
  return started_;
}

Clock::time_point Job::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

}  // namespace hypura::server
