// FaultInjectingQueue: the test twin of a real ReadQueue. It forwards reads to an inner
// queue and, by a seeded plan, makes some fail with EIO, return short, get interrupted
// (EINTR), stall for a while, or wait at a gate until the test opens it, so Storage's
// error, continuation and ordering logic can be tested without a failing disk and without
// timers. Deterministic for a given seed and submission order. hypura_faulty (the test
// build of the binary, cli/testing/faulty_main.cc) puts every read of a process through it.
//
// Thread-safety: as ReadQueue (driven by one thread). counts() may be read afterwards;
// a ReadGate is opened from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/read_queue.h"

namespace hypura::io {

// Holds back every read it guards until the test opens the file bytes that read
// overlaps, so a test sees reads in flight for exactly as long as it chooses.
class ReadGate {
 public:
  // Releases the reads overlapping file bytes [begin, end), held or still to come.
  void open(uint64_t begin, uint64_t end);
  void open_all();
  bool holds(uint64_t offset, uint64_t length) const;

 private:
  mutable std::mutex mu_;
  bool all_open_ = false;
  std::vector<std::pair<uint64_t, uint64_t>> opened_;
};

// Opens its gate (every read) when it goes out of scope: declared after what reads
// through the gate, it lets that drain on any exit from the test.
struct OpenAtExit {
  std::shared_ptr<ReadGate> gate;
  ~OpenAtExit() { gate->open_all(); }
};

struct FaultPlan {
  double eio_probability = 0;      // per device read
  double short_probability = 0;    // per device read: returns about half (block-aligned)
  double eintr_probability = 0;    // per device read: -EINTR (the reader must retry)
  std::shared_ptr<ReadGate> gate;  // null: no read waits
  double stall_probability = 0;    // per device read: completes stall_ms late
  int64_t stall_ms = 0;
  // Every read overlapping file bytes [fail_begin, fail_end) fails with EIO; after
  // fail_times such failures (0: never) the range reads again (a transient fault).
  uint64_t fail_begin = 0, fail_end = 0;
  uint64_t fail_times = 0;
  uint64_t seed = 1;
};

// A plan from its text form, comma-separated: eio=P, short=P, eintr=P (probabilities per
// device read), stall=P:MS, fail=BEGIN-END (file bytes), fail-times=N, seed=N.
// E.g. "eio=0.01,stall=0.002:3000,seed=7".
Result<FaultPlan> parse_fault_plan(std::string_view text);

struct FaultCounts {
  uint64_t reads = 0, eio = 0, short_reads = 0, eintr = 0, stalls = 0;
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
    uint64_t offset = 0, length = 0;  // the device read's file bytes, for the gate
    Clock::time_point release_at{};   // a stalled read's end
  };
  bool chance(double p);
  bool in_bad_range(const IoOp& op);
  bool gated(const Held& h) const {
    return (plan_.gate && plan_.gate->holds(h.offset, h.length)) || Clock::now() < h.release_at;
  }

  std::unique_ptr<ReadQueue> inner_;
  FaultPlan plan_;
  std::mt19937_64 rng_;
  std::shared_ptr<FaultCounts> counts_ = std::make_shared<FaultCounts>();
  std::deque<Held> held_;  // finished (or failed) reads not yet released
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> forwarded_ops_;  // cookie: bytes
  uint32_t forwarded_ = 0;       // reads inside the inner queue
  uint64_t range_failures_ = 0;  // reads failed in [fail_begin, fail_end)
};

}  // namespace hypura::io
