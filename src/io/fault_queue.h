// FaultInjectingQueue: the test twin of a real ReadQueue. It forwards reads to an inner
// queue and, by a seeded plan, makes some fail with EIO, return short, get interrupted
// (EINTR), or complete late, so Storage's error, continuation and ordering logic can be
// tested without a failing disk. Deterministic for a given seed and submission order.
//
// Thread-safety: as ReadQueue (driven by one thread). counts() may be read afterwards.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>

#include "io/read_queue.h"

namespace hypura::io {

struct FaultPlan {
  double eio_probability = 0;    // per device read
  double short_probability = 0;  // per device read: returns about half (block-aligned)
  double eintr_probability = 0;  // per device read: -EINTR (the reader must retry)
  int64_t delay_us = 0;          // every read completes at least this long after submit
  // Every read overlapping file bytes [fail_begin, fail_end) fails with EIO.
  uint64_t fail_begin = 0, fail_end = 0;
  uint64_t seed = 1;
};

struct FaultCounts {
  uint64_t reads = 0, eio = 0, short_reads = 0, eintr = 0;
};

class FaultInjectingQueue final : public ReadQueue {
 public:
  FaultInjectingQueue(std::unique_ptr<ReadQueue> inner, FaultPlan plan);

  uint32_t capacity() const override { return inner_->capacity(); }
  uint32_t in_flight() const override;
  std::string name() const override { return "faulty(" + inner_->name() + ")"; }
  Status submit(std::span<const IoOp> ops) override;
  void wake() override { inner_->wake(); }
  size_t reap(std::span<IoResult> out, int64_t timeout_us) override;

  // Shared so a test can read the counts after Storage took ownership of the queue.
  std::shared_ptr<const FaultCounts> counts() const { return counts_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Held {
    IoResult result;
    Clock::time_point ready;
  };
  bool chance(double p);

  std::unique_ptr<ReadQueue> inner_;
  FaultPlan plan_;
  std::mt19937_64 rng_;
  std::shared_ptr<FaultCounts> counts_ = std::make_shared<FaultCounts>();
  std::deque<Held> held_;                    // finished (or failed) reads not yet released
  std::deque<Clock::time_point> submitted_;  // submit times of reads forwarded, FIFO
  uint32_t forwarded_ = 0;                   // reads inside the inner queue
};

}  // namespace hypura::io
