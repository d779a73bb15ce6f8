// Thread-pool engine: the fallback where io_uring is unavailable. Each worker takes a
// queued read, calls pread, and posts the result; reap() waits on the result queue.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "io/read_queue.h"

namespace hypura::io {
namespace {

class ThreadQueue final : public ReadQueue {
 public:
  ThreadQueue(uint32_t queue_depth, uint32_t n_threads) : capacity_(queue_depth) {
    for (uint32_t i = 0; i < n_threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ThreadQueue() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    todo_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  uint32_t capacity() const override { return capacity_; }
  void wake() override {
    {
      std::lock_guard lock(mu_);
      woken_ = true;
    }
    done_cv_.notify_all();
  }
  uint32_t in_flight() const override { return in_flight_; }
  std::string name() const override { return "threads"; }

  Status submit(std::span<const IoOp> ops) override {
    {
      std::lock_guard lock(mu_);
      todo_.insert(todo_.end(), ops.begin(), ops.end());
    }
    in_flight_ += static_cast<uint32_t>(ops.size());
    todo_cv_.notify_all();
    return Status::ok();
  }

  size_t reap(std::span<IoResult> out, int64_t timeout_us) override {
    if (out.empty() || in_flight_ == 0) return 0;
    std::unique_lock lock(mu_);
    done_cv_.wait_for(lock, std::chrono::microseconds(timeout_us),
                      [&] { return !done_.empty() || woken_; });
    woken_ = false;
    size_t n = 0;
    while (n < out.size() && !done_.empty()) {
      out[n++] = done_.front();
      done_.pop_front();
    }
    in_flight_ -= static_cast<uint32_t>(n);
    return n;
  }

 private:
  void work() {
    for (;;) {
      IoOp op;
      {
        std::unique_lock lock(mu_);
        todo_cv_.wait(lock, [&] { return stop_ || !todo_.empty(); });
        if (todo_.empty()) return;  // stop_ and drained
        op = todo_.front();
        todo_.pop_front();
      }
      ssize_t rc;
      do {
        rc = ::pread(op.fd, op.buf, op.length, static_cast<off_t>(op.offset));
      } while (rc < 0 && errno == EINTR);
      IoResult r{op.cookie, rc < 0 ? -static_cast<int64_t>(errno) : rc};
      {
        std::lock_guard lock(mu_);
        done_.push_back(r);
      }
      done_cv_.notify_one();
    }
  }

  uint32_t capacity_;
  uint32_t in_flight_ = 0;  // touched only by the driving thread
  std::mutex mu_;
  std::condition_variable todo_cv_, done_cv_;
  std::deque<IoOp> todo_;
  std::deque<IoResult> done_;
  bool stop_ = false;
  bool woken_ = false;  // wake() called: end the current reap() wait
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<ReadQueue> make_thread_queue(uint32_t queue_depth, uint32_t n_threads) {
  return std::make_unique<ThreadQueue>(queue_depth, n_threads == 0 ? 1 : n_threads);
}

namespace {

QueueWrapper& queue_wrapper() {
  static QueueWrapper wrapper;
  return wrapper;
}

Result<std::unique_ptr<ReadQueue>> make_plain_queue(QueueKind kind, uint32_t queue_depth) {
  if (queue_depth == 0) return invalid_argument("I/O queue depth must be at least 1");
  if (kind == QueueKind::kThreads) return make_thread_queue(queue_depth, queue_depth);
  auto uring = make_uring_queue(queue_depth);
  if (uring.is_ok() || kind == QueueKind::kUring) return uring;
  log().info("io: io_uring unavailable ({}); using a pread thread pool", uring.status().message());
  return make_thread_queue(queue_depth, queue_depth);
}

}  // namespace

Result<std::unique_ptr<ReadQueue>> make_queue(QueueKind kind, uint32_t queue_depth) {
  HYPURA_ASSIGN_OR_RETURN(std::unique_ptr<ReadQueue> queue, make_plain_queue(kind, queue_depth));
  if (queue_wrapper()) return queue_wrapper()(std::move(queue));
  return queue;
}

void set_queue_wrapper(QueueWrapper wrapper) {
  queue_wrapper() = std::move(wrapper);
}

const char* queue_kind_name(QueueKind kind) {
  switch (kind) {
    case QueueKind::kAuto:
      return "auto";
    case QueueKind::kUring:
      return "io_uring";
    case QueueKind::kThreads:
      return "threads";
  }
  return "?";
}

}  // namespace hypura::io
