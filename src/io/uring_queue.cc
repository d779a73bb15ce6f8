// io_uring engine: one ring, reads submitted in batches, completions reaped with a timeout.
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "io/read_queue.h"

namespace hypura::io {
namespace {

constexpr uint64_t kWakeCookie = ~uint64_t{0};  // the eventfd poll's completion

class UringQueue final : public ReadQueue {
 public:
  explicit UringQueue(uint32_t queue_depth) : capacity_(queue_depth) {}
  ~UringQueue() override {
    if (initialised_) io_uring_queue_exit(&ring_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  // One extra entry for the poll on the wake-up eventfd.
  Status init() {
    int rc = io_uring_queue_init(capacity_ + 1, &ring_, 0);
    if (rc < 0) return unsupported(std::string("io_uring_queue_init: ") + std::strerror(-rc));
    initialised_ = true;
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return unsupported(std::string("eventfd: ") + std::strerror(errno));
    return arm_wake();
  }

  void wake() override {
    uint64_t one = 1;
    ssize_t n = ::write(wake_fd_, &one, sizeof one);
    (void)n;  // EAGAIN means a wake-up is already pending
  }

  uint32_t capacity() const override { return capacity_; }
  uint32_t in_flight() const override { return in_flight_; }
  std::string name() const override { return "io_uring"; }

  Status submit(std::span<const IoOp> ops) override {
    for (const IoOp& op : ops) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return io_error("io_uring submission queue full");
      io_uring_prep_read(sqe, op.fd, op.buf, op.length, op.offset);
      io_uring_sqe_set_data64(sqe, op.cookie);
    }
    int pending = static_cast<int>(ops.size());
    while (pending > 0) {
      int rc = io_uring_submit(&ring_);
      if (rc == -EINTR || rc == -EAGAIN) continue;
      if (rc < 0) return io_error(std::string("io_uring_submit: ") + std::strerror(-rc));
      pending -= rc;
    }
    in_flight_ += static_cast<uint32_t>(ops.size());
    return Status::ok();
  }

  size_t reap(std::span<IoResult> out, int64_t timeout_us) override {
    if (out.empty() || in_flight_ == 0) return 0;
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{timeout_us / 1000000, (timeout_us % 1000000) * 1000};
    int rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
    if (rc < 0) return 0;  // -ETIME or -EINTR: nothing yet
    size_t n = 0, seen = 0;
    bool woken = false;
    unsigned head;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      if (n == out.size()) break;
      ++seen;
      if (io_uring_cqe_get_data64(cqe) == kWakeCookie) {
        woken = true;
        continue;
      }
      out[n++] = IoResult{io_uring_cqe_get_data64(cqe), cqe->res};
    }
    io_uring_cq_advance(&ring_, static_cast<unsigned>(seen));
    in_flight_ -= static_cast<uint32_t>(n);
    if (woken) {
      uint64_t count;
      ssize_t r = ::read(wake_fd_, &count, sizeof count);  // drain, then listen again
      (void)r;
      (void)arm_wake();
    }
    return n;
  }

 private:
  // A one-shot poll on the eventfd: wake() makes it complete, ending a waiting reap().
  Status arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return io_error("io_uring submission queue full");
    io_uring_prep_poll_add(sqe, wake_fd_, POLLIN);
    io_uring_sqe_set_data64(sqe, kWakeCookie);
    int rc = io_uring_submit(&ring_);
    return rc < 0 ? io_error(std::string("io_uring_submit: ") + std::strerror(-rc)) : Status::ok();
  }

  io_uring ring_{};
  int wake_fd_ = -1;
  uint32_t capacity_;
  uint32_t in_flight_ = 0;
  bool initialised_ = false;
};

}  // namespace

Result<std::unique_ptr<ReadQueue>> make_uring_queue(uint32_t queue_depth) {
  auto engine = std::make_unique<UringQueue>(queue_depth);
  HYPURA_RETURN_IF_ERROR(engine->init());
  return std::unique_ptr<ReadQueue>(std::move(engine));
}

}  // namespace hypura::io
