#include "io/testing/fault_queue.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "io/aligned_buffer.h"

namespace hypura::io {

void ReadGate::open(uint64_t begin, uint64_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  opened_.emplace_back(begin, end);
}

void ReadGate::open_all() {
  std::lock_guard<std::mutex> lock(mu_);
  all_open_ = true;
}

bool ReadGate::holds(uint64_t offset, uint64_t length) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (all_open_) return false;
  return std::none_of(opened_.begin(), opened_.end(), [&](const auto& r) {
    return offset < r.second && offset + length > r.first;
  });
}

FaultInjectingQueue::FaultInjectingQueue(std::unique_ptr<ReadQueue> inner, FaultPlan plan)
    : inner_(std::move(inner)), plan_(std::move(plan)), rng_(plan_.seed) {}

uint32_t FaultInjectingQueue::in_flight() const {
  return forwarded_ + static_cast<uint32_t>(held_.size());
}

bool FaultInjectingQueue::chance(double p) {
  return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p;
}

Status FaultInjectingQueue::submit(std::span<const IoOp> ops) {
  std::vector<IoOp> forward;
  for (IoOp op : ops) {
    ++counts_->reads;
    bool in_bad_range = op.offset < plan_.fail_end && op.offset + op.length > plan_.fail_begin;
    if (in_bad_range || chance(plan_.eio_probability)) {
      ++counts_->eio;
      held_.push_back({IoResult{op.cookie, -EIO}, op.offset, op.length});
    } else if (chance(plan_.eintr_probability)) {
      ++counts_->eintr;
      held_.push_back({IoResult{op.cookie, -EINTR}, op.offset, op.length});
    } else {
      if (op.length > kDirectAlignment && chance(plan_.short_probability)) {
        ++counts_->short_reads;
        op.length = static_cast<uint32_t>(align_down(op.length / 2, kDirectAlignment));
      }
      forward.push_back(op);
      forwarded_ops_[op.cookie] = {op.offset, op.length};
    }
  }
  forwarded_ += static_cast<uint32_t>(forward.size());
  if (forward.empty()) return Status::ok();
  return inner_->submit(forward);
}

size_t FaultInjectingQueue::reap(std::span<IoResult> out, int64_t timeout_us) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::microseconds(timeout_us);
  std::vector<IoResult> got(inner_->capacity());
  for (;;) {
    // Move the inner engine's completions into held_; the gate decides when they leave.
    size_t n = forwarded_ > 0 ? inner_->reap(got, held_.empty() ? 200 : 0) : 0;
    for (size_t i = 0; i < n; ++i) {
      auto it = forwarded_ops_.find(got[i].cookie);
      held_.push_back({got[i], it->second.first, it->second.second});
      forwarded_ops_.erase(it);
    }
    forwarded_ -= static_cast<uint32_t>(n);
    size_t count = 0;
    for (auto it = held_.begin(); it != held_.end() && count < out.size();) {
      if (!gated(*it)) {
        out[count++] = it->result;
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    if (count > 0 || Clock::now() >= deadline || in_flight() == 0) return count;
    if (forwarded_ == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace hypura::io
