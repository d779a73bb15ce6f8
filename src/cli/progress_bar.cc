#include "cli/progress_bar.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/size.h"

namespace hypura::cli {

ProgressBar::ProgressBar() : start_(Clock::now()), tty_(isatty(STDERR_FILENO)) {}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (done == last_done_) return;  // writers may report the end twice (data, padding)
  last_done_ = done;
  if (first_done_ == UINT64_MAX) first_done_ = done;
  const Clock::time_point now = Clock::now();
  const int decile = total ? static_cast<int>(10 * done / total) : 10;
  const bool due = tty_ ? now - last_ >= std::chrono::milliseconds(100) : decile != last_decile_;
  if (!due && done != total) return;
  last_ = now;
  last_decile_ = decile;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double rate = secs > 0 ? static_cast<double>(done - first_done_) / secs : 0;
  const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1;
  const int filled = static_cast<int>(frac * 30);
  std::fprintf(stderr, "%s[%s%s] %3d%% %s / %s  %s/s  ETA %.0fs%s", tty_ ? "\r" : "",
               std::string(filled, '#').c_str(), std::string(30 - filled, '.').c_str(),
               static_cast<int>(frac * 100), format_size(done).c_str(), format_size(total).c_str(),
               format_size(static_cast<uint64_t>(rate)).c_str(),
               rate > 0 ? static_cast<double>(total - done) / rate : 0.0, tty_ ? "" : "\n");
  if (tty_ && done == total) std::fputc('\n', stderr);
}

}  // namespace hypura::cli
