// `hypura bench MODEL --sweep 1G,2G,3G`: generation speed against the RAM budget.
//
// Each budget runs in a child process (`hypura bench ... --ram-budget B --json`), so every
// point starts cold and its peak RSS is its own. The points print as a table and, with
// --plot FILE, as an SVG chart of tok/s against the budget with the same run's storage
// bound (the disk's best sequential rate over the bytes streamed per token), the planner's
// prediction and, where bench ran it, the plain mmap baseline.
//
// Thread-safety: plain functions; run_sweep blocks until every child has finished.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hypura::cli {

struct SweepPoint {
  uint64_t budget_bytes = 0;
  std::string error;  // why this budget gave no figures ("" when it ran)
  std::string mode;   // the plan's mode
  double tg_tps = 0, tg_stddev = 0;
  double bound_tps = 0;  // storage bound (0: nothing streamed, no bound)
  double predicted_tps = 0;
  double mmap_tps = 0;  // plain mmap baseline (0: not run)
  uint64_t peak_rss_bytes = 0;
};

// Runs `exe bench <child_args> --ram-budget B --json` for each budget and reads its JSON.
std::vector<SweepPoint> run_sweep(const std::string& exe,
                                  const std::vector<std::string>& child_args,
                                  const std::vector<uint64_t>& budgets);

// The table bench prints for a sweep.
std::string sweep_table(const std::vector<SweepPoint>& points);

// A self-contained SVG (about 640 x 400) of the points: measured tok/s, storage bound,
// prediction and mmap baseline against the budget in GiB.
std::string sweep_svg(const std::vector<SweepPoint>& points, const std::string& title);

}  // namespace hypura::cli
