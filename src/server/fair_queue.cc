#include "server/fair_queue.h"

namespace hypura::server {

FairQueue::FairQueue(size_t capacity) : capacity_(capacity) {}

Status FairQueue::push(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return Status(StatusCode::kCancelled, "server is shutting down");
    if (size_ >= capacity_) {
      return resource_exhausted("server busy: " + std::to_string(size_) +
                                " requests are already waiting (--max-queue)");
    }
    auto& jobs = by_client_[job->client()];
    if (jobs.empty()) turn_.push_back(job->client());
    jobs.push_back(std::move(job));
    ++size_;
  }
  cv_.notify_one();
  return Status::ok();
}

std::shared_ptr<Job> FairQueue::pop() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return closed_ || size_ > 0; });
  if (closed_) return nullptr;
  std::string client = std::move(turn_.front());
  turn_.pop_front();
  auto it = by_client_.find(client);
  std::shared_ptr<Job> job = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) {
    by_client_.erase(it);
  } else {
    turn_.push_back(std::move(client));  // the client's next job waits for the others
  }
  --size_;
  return job;
}

std::vector<std::shared_ptr<Job>> FairQueue::close() {
  std::vector<std::shared_ptr<Job>> waiting;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (auto& [client, jobs] : by_client_) {
      for (auto& job : jobs) waiting.push_back(std::move(job));
    }
    by_client_.clear();
    turn_.clear();
    size_ = 0;
  }
  cv_.notify_all();
  return waiting;
}

size_t FairQueue::size() const {
  std::lock_guard lock(mu_);
  return size_;
}

}  // namespace hypura::server
