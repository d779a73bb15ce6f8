#include "io/fault_queue.h"

#include <algorithm>
#include <cerrno>
#include <thread>
#include <vector>

#include "io/aligned_buffer.h"

namespace hypura::io {

FaultInjectingQueue::FaultInjectingQueue(std::unique_ptr<ReadQueue> inner, FaultPlan plan)
    : inner_(std::move(inner)), plan_(plan), rng_(plan.seed) {}

uint32_t FaultInjectingQueue::in_flight() const {
  return forwarded_ + static_cast<uint32_t>(held_.size());
}

bool FaultInjectingQueue::chance(double p) {
  return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p;
}

Status FaultInjectingQueue::submit(std::span<const IoOp> ops) {
  std::vector<IoOp> forward;
  auto now = Clock::now();
  auto ready = now + std::chrono::microseconds(plan_.delay_us);
  for (IoOp op : ops) {
    ++counts_->reads;
    bool in_bad_range = op.offset < plan_.fail_end && op.offset + op.length > plan_.fail_begin;
    if (in_bad_range || chance(plan_.eio_probability)) {
      ++counts_->eio;
      held_.push_back({IoResult{op.cookie, -EIO}, ready});
    } else if (chance(plan_.eintr_probability)) {
      ++counts_->eintr;
      held_.push_back({IoResult{op.cookie, -EINTR}, ready});
    } else {
      if (op.length > kDirectAlignment && chance(plan_.short_probability)) {
        ++counts_->short_reads;
        op.length = static_cast<uint32_t>(align_down(op.length / 2, kDirectAlignment));
      }
      forward.push_back(op);
      submitted_.push_back(now);
    }
  }
  forwarded_ += static_cast<uint32_t>(forward.size());
  if (forward.empty()) return Status::ok();
  return inner_->submit(forward);
}

size_t FaultInjectingQueue::reap(std::span<IoResult> out, int64_t timeout_us) {
  auto deadline = Clock::now() + std::chrono::microseconds(timeout_us);
  std::vector<IoResult> got(inner_->capacity());
  for (;;) {
    // Move the inner engine's completions into held_, each ready delay_us after submit.
    size_t n = forwarded_ > 0 ? inner_->reap(got, held_.empty() ? 200 : 0) : 0;
    for (size_t i = 0; i < n; ++i) {
      auto ready = submitted_.front() + std::chrono::microseconds(plan_.delay_us);
      submitted_.pop_front();
      held_.push_back({got[i], ready});
    }
    forwarded_ -= static_cast<uint32_t>(n);
    size_t count = 0;
    auto now = Clock::now();
    for (auto it = held_.begin(); it != held_.end() && count < out.size();) {
      if (it->ready <= now) {
        out[count++] = it->result;
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    if (count > 0 || now >= deadline || in_flight() == 0) return count;
    if (forwarded_ == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace hypura::io
