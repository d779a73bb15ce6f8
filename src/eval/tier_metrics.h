// Tier metrics for `hypura bench`: what streaming achieved against what the disk allows.
//
// Around a timed run, TierCounters snapshots the provider (bytes read, stall time,
// passes). tier_metrics() turns two snapshots, the token count and time of the run and
// the same run's references (StorageReferences) into the figures bench prints:
//
//   bytes_read_per_token   storage bytes the run read / tokens
//   read_bps               those bytes / run time (achieved read bandwidth)
//   disk_read_bps          the disk's best sequential direct-read rate, measured in the
//                          same run as the profile measures it (block x queue depth grid,
//                          on the model file, read-only), before and after the tests, averaged
//   read_ratio             read_bps / disk_read_bps
//   storage_bound_tok_s    disk_read_bps / streamed bytes per token (plan)
//   tg_bound_ratio         tok/s / storage_bound_tok_s: the honest ratio
//   pattern_read_bps       the provider's own reads with no compute (same slots, order and
//                          read-ahead: TieredWeights::io_only_stream_bps), and
//   pattern_bound_tok_s, tg_pattern_ratio   the bound and ratio against that pattern: how
//                          much of the gap to the disk is the I/O pattern, how much compute
//   stall_s_per_token      time acquire() waited for reads / tokens
//   predicted_tok_s        the planner's prediction re-evaluated with the same run's disk
//                          grid and memory bandwidth (TieredWeights::predict_with; the plan
//                          at load used the cached profile: predicted_at_load_tok_s);
//                          prediction_ratio = tok/s / predicted_tok_s
//   peak_rss, budget       VmHWM and the ledger's budget; planned_ram beside ledger_peak
//   load_bps, load_ratio   resident-part load bandwidth and its ratio to load_reference_bps
//
// Why the disk and not the pattern: a poor pattern (small slots, shallow prefetch) makes
// a poor bound, and "0.9 x bound" then hides a slow engine. Why the same run: a virtual
// disk's speed drifts by 2x between runs, so only figures taken minutes apart compare.
// The load reference reads the resident ranges again into their already faulted-in memory.
//
// Thread-safety: plain functions over snapshots.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "profiler/hardware_profile.h"
#include "runtime/tiered_weights.h"

namespace hypura::eval {

// The same run's reference figures, measured by bench between its tests.
struct StorageReferences {
  std::vector<double> disk_runs;                  // each grid's best point, bytes/s
  std::vector<profiler::SeqReadPoint> disk_grid;  // the last grid's points
  uint64_t disk_cursor = 0;                       // where the next grid continues reading
  std::vector<double> pattern_runs;               // the provider's I/O-only passes, bytes/s
  double load_reference_bps = 0;
  double memory_read_bps = 0;  // memory read bandwidth, before the load (0: none)
  std::vector<profiler::DecodeRate> decode_rates;  // the decode probe of the model's types

  double disk_read_bps() const;     // mean of disk_runs (0: none)
  double pattern_read_bps() const;  // mean of pattern_runs (0: none)
  // The profile with this run's figures for TieredWeights::predict_with: `base` with its
  // sequential points and seq_read_bps replaced by those measured, its decode rates by
  // this run's, and the higher of its and this run's memory bandwidth (contention only
  // lowers a probe).
  profiler::HardwareProfile same_run_profile(const profiler::HardwareProfile& base) const;
};

// Runs the profile's sequential grid read-only on `path` (the model file) and adds its
// best point to refs.disk_runs; the grid itself replaces refs.disk_grid.
Status measure_disk_reference(const std::string& path, StorageReferences& refs);

struct TierCounters {
  uint64_t bytes_read = 0;
  double stall_seconds = 0;
  uint64_t passes = 0;
  static TierCounters take(const runtime::TieredWeights& w);
};

struct TierMetrics {
  std::string mode;
  uint64_t streamed_bytes_per_token = 0;  // the plan's, per forward pass
  double bytes_read_per_token = 0;
  double read_bps = 0;
  double disk_read_bps = 0;
  uint64_t disk_block_bytes = 0;  // the fastest grid point (last grid)
  uint32_t disk_queue_depth = 0;
  std::vector<double> disk_runs;
  double read_ratio = 0;
  double storage_bound_tok_s = 0;  // 0 when nothing streams
  double tok_s = 0;
  double tg_bound_ratio = 0;
  double pattern_read_bps = 0;
  double pattern_bound_tok_s = 0;
  double tg_pattern_ratio = 0;
  double stall_s_per_token = 0;
  double predicted_tok_s = 0;          // at the same run's disk grid (else at load)
  double predicted_at_load_tok_s = 0;  // the plan's, at the cached profile's figures
  double prediction_ratio = 0;
  uint64_t peak_rss = 0;
  uint64_t budget = 0;  // ledger budget (0: none)
  uint64_t ledger_peak = 0;
  uint64_t planned_ram = 0;     // the plan's RAM total (MemoryPlan::ram_total)
  std::string ledger_by_kind;   // the ledger now, per kind (MemoryLedger::summary)
  std::string planned_by_kind;  // the plan's RAM, in the same kinds
  uint64_t resident_bytes = 0;
  double load_bps = 0;
  double load_ratio = 0;
  double load_reference_bps = 0;
  double load_seconds = 0;
  double load_populate_seconds = 0;  // faulting in the fresh pages (overlaps the reads)
  int pool_slots = 0;
  uint64_t slot_bytes = 0;
  int prefetch_depth = 0;
  bool resident_locked = false;
};

// `tokens` generated one per forward pass in `seconds`, between `before` and `after`.
TierMetrics tier_metrics(const runtime::TieredWeights& w, const TierCounters& before,
                         const TierCounters& after, int tokens, double seconds,
                         const StorageReferences& refs);

nlohmann::json tier_metrics_json(const TierMetrics& m);
std::string tier_metrics_text(const TierMetrics& m);  // a few lines for the terminal

}  // namespace hypura::eval
