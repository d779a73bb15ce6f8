// FairQueue: the bounded queue of generation jobs waiting for the one model.
//
// Fair means round-robin between clients (keyed by Job::client(), the remote address):
// a client that sends twenty requests does not make another client wait behind all
// twenty. Within one client, jobs run in arrival order. The bound counts waiting jobs
// (not the one running); push() on a full queue fails with kResourceExhausted, which the
// HTTP layer answers with 503.
//
// Thread-safety: all methods are thread-safe. Ownership: jobs are shared_ptr.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/job.h"

namespace hypura::server {

class FairQueue {
 public:
  explicit FairQueue(size_t capacity);

  // kResourceExhausted when `capacity` jobs are waiting; kCancelled after close().
  Status push(std::shared_ptr<Job> job);
  // Blocks until a job is available (next client in round-robin order) or the queue is
  // closed (returns nullptr).
  std::shared_ptr<Job> pop();
  // Stops accepting jobs, wakes pop() and returns the jobs that were waiting.
  std::vector<std::shared_ptr<Job>> close();

  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  size_t size_ = 0;
  std::deque<std::string> turn_;  // clients with waiting jobs, next to serve first
  std::map<std::string, std::deque<std::shared_ptr<Job>>> by_client_;
};

}  // namespace hypura::server
