// Tier metrics for `hypura bench`: what streaming achieved against what the disk allows.
//
// Around a timed run, TierCounters snapshots the provider (bytes read, stall time,
// passes). tier_metrics() turns two snapshots, the token count and time of the run and a
// direct-I/O read bandwidth measured in the same process into the figures bench prints:
//
//   bytes_read_per_token   storage bytes the run read / tokens
//   read_bps               those bytes / run time (achieved read bandwidth)
//   read_ratio             read_bps / direct_read_bps
//   storage_bound_tok_s    direct_read_bps / streamed bytes per token (plan)
//   tg_bound_ratio         tok/s / storage_bound_tok_s
//   stall_s_per_token      time acquire() waited for reads / tokens
//   predicted_tok_s        the planner's prediction; prediction_ratio = tok/s / it
//   peak_rss, budget       VmHWM and the ledger's budget; planned_ram beside ledger_peak
//   load_bps, load_ratio   resident-part load bandwidth and its ratio to load_reference_bps
//
// The references repeat the provider's own reads in the same process (TieredWeights::
// io_only_stream_bps, reload_resident_bps): direct_read_bps is dense-streaming passes
// with no compute (the same slots, order and read-ahead), load_reference_bps the resident
// load again into its already faulted-in memory. So "x bound" compares with reading those
// very bytes on this disk right now, not another region or another day (a virtual disk's
// speed drifts by 2x between runs).
//
// Thread-safety: plain functions over snapshots.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/tiered_weights.h"

namespace hypura::runtime {

struct TierCounters {
  uint64_t bytes_read = 0;
  double stall_seconds = 0;
  uint64_t passes = 0;
  static TierCounters take(const TieredWeights& w);
};

struct TierMetrics {
  std::string mode;
  uint64_t streamed_bytes_per_token = 0;  // the plan's, per forward pass
  double bytes_read_per_token = 0;
  double read_bps = 0;
  double direct_read_bps = 0;
  double read_ratio = 0;
  double storage_bound_tok_s = 0;         // 0 when nothing streams
  double tok_s = 0;
  double tg_bound_ratio = 0;
  double stall_s_per_token = 0;
  double predicted_tok_s = 0;
  double prediction_ratio = 0;
  uint64_t peak_rss = 0;
  uint64_t budget = 0;                    // ledger budget (0: none)
  uint64_t ledger_peak = 0;
  uint64_t planned_ram = 0;               // the plan's RAM total (MemoryPlan::ram_total)
  std::string ledger_by_kind;             // the ledger now, per kind (MemoryLedger::summary)
  std::string planned_by_kind;            // the plan's RAM, in the same kinds
  uint64_t resident_bytes = 0;
  double load_bps = 0;
  double load_ratio = 0;
  double load_reference_bps = 0;
  double load_seconds = 0;
  double load_populate_seconds = 0;       // faulting in the fresh pages (overlaps the reads)
  int pool_slots = 0;
  uint64_t slot_bytes = 0;
  int prefetch_depth = 0;
  bool resident_locked = false;
};

// `tokens` generated one per forward pass in `seconds`, between `before` and `after`.
TierMetrics tier_metrics(const TieredWeights& w, const TierCounters& before,
                         const TierCounters& after, int tokens, double seconds,
                         double direct_read_bps, double load_reference_bps);

nlohmann::json tier_metrics_json(const TierMetrics& m);
std::string tier_metrics_text(const TierMetrics& m);  // a few lines for the terminal

}  // namespace hypura::runtime
