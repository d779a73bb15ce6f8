// A one-line progress bar on stderr for long work (hypura synth's writes, hypura pull's
// downloads): percent, bytes, rate and time left, redrawn at most 10 times a second on a
// terminal and every 10% otherwise, so CI logs stay short.
#pragma once

#include <chrono>
#include <cstdint>

namespace hypura::cli {

class ProgressBar {
 public:
  ProgressBar();
  // done of total bytes; the rate counts from the first call's `done` (a resumed download
  // starts part way).
  void update(uint64_t done, uint64_t total);

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
  Clock::time_point last_{};
  int last_decile_ = -1;
  uint64_t first_done_ = UINT64_MAX;
  uint64_t last_done_ = UINT64_MAX;
  bool tty_;
};

}  // namespace hypura::cli
