#include "io/testing/fault_queue.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "io/aligned_buffer.h"

namespace hypura::io {
namespace {

// A number of type T from all of `text`, or nullopt.
template <typename T>
std::optional<T> number(std::string_view text) {
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<double> probability(std::string_view text) {
  auto p = number<double>(text);
  return p && *p >= 0 && *p <= 1 ? p : std::nullopt;
}

// "A<sep>B" as two numbers.
template <typename A, typename B>
std::optional<std::pair<A, B>> pair_of(std::string_view text, char sep) {
  const size_t at = text.find(sep);
  if (at == std::string_view::npos) return std::nullopt;
  auto a = number<A>(text.substr(0, at));
  auto b = number<B>(text.substr(at + 1));
  if (!a || !b) return std::nullopt;
  return std::pair(*a, *b);
}

// Sets one key of the plan; false when the key or its value is not understood.
bool set_fault(FaultPlan& plan, std::string_view key, std::string_view value) {
  if (key == "eio" || key == "short" || key == "eintr") {
    auto p = probability(value);
    if (!p) return false;
    (key == "eio"     ? plan.eio_probability
     : key == "short" ? plan.short_probability
                      : plan.eintr_probability) = *p;
    return true;
  }
  if (key == "stall") {
    auto v = pair_of<double, int64_t>(value, ':');
    if (!v || v->first < 0 || v->first > 1 || v->second < 0) return false;
    std::tie(plan.stall_probability, plan.stall_ms) = *v;
    return true;
  }
  if (key == "fail") {
    auto v = pair_of<uint64_t, uint64_t>(value, '-');
    if (!v || v->first >= v->second) return false;
    std::tie(plan.fail_begin, plan.fail_end) = *v;
    return true;
  }
  auto n = number<uint64_t>(value);
  if (!n) return false;
  if (key == "fail-times")
    plan.fail_times = *n;
  else if (key == "seed")
    plan.seed = *n;
  else
    return false;
  return true;
}

}  // namespace

Result<FaultPlan> parse_fault_plan(std::string_view text) {
  FaultPlan plan;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || !set_fault(plan, item.substr(0, eq), item.substr(eq + 1)))
      return invalid_argument("fault plan: cannot use '" + std::string(item) +
                              "' (eio=P, short=P, eintr=P, stall=P:MS, fail=BEGIN-END, "
                              "fail-times=N, seed=N)");
  }
  return plan;
}

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

bool FaultInjectingQueue::in_bad_range(const IoOp& op) {
  if (op.offset >= plan_.fail_end || op.offset + op.length <= plan_.fail_begin) return false;
  if (plan_.fail_times > 0 && range_failures_ >= plan_.fail_times) return false;  // healed
  ++range_failures_;
  return true;
}

Status FaultInjectingQueue::submit(std::span<const IoOp> ops) {
  std::vector<IoOp> forward;
  for (IoOp op : ops) {
    ++counts_->reads;
    if (in_bad_range(op) || chance(plan_.eio_probability)) {
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
  auto deadline = Clock::now() + std::chrono::microseconds(timeout_us);
  std::vector<IoResult> got(inner_->capacity());
  for (;;) {
    // Move the inner engine's completions into held_; the gate decides when they leave.
    size_t n = forwarded_ > 0 ? inner_->reap(got, held_.empty() ? 200 : 0) : 0;
    for (size_t i = 0; i < n; ++i) {
      auto it = forwarded_ops_.find(got[i].cookie);
      held_.push_back({got[i], it->second.first, it->second.second});
      forwarded_ops_.erase(it);
      if (chance(plan_.stall_probability)) {
        ++counts_->stalls;
        held_.back().release_at = Clock::now() + std::chrono::milliseconds(plan_.stall_ms);
      }
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
