// The plain-way comparison run of `hypura bench --baseline`: all weights through mmap
// (MmapProvider), no planner, no ledger, tokens generated one per forward pass.
//
// mmap_baseline_allowed() is the safety rule of the original: refused when the model is
// bigger than RAM (the cgroup limit when one applies) minus a 4 GiB reserve, because the
// page cache would then thrash the machine; `force` runs it anyway.
//
// Thread-safety: one call at a time.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "gguf/gguf.h"

namespace hypura::eval {

inline constexpr uint64_t kBaselineReserveBytes = uint64_t{4} << 30;

// OK, or kResourceExhausted with the sizes and the way out (--force).
Status mmap_baseline_allowed(const gguf::GgufFile& file, bool force);

struct BaselineResult {
  double tg_tok_s = 0;
  int tokens = 0;
  double seconds = 0;
  uint64_t peak_rss = 0;  // VmHWM after the run (the process's, so including earlier work)
};

// Generates `n_tokens` random tokens one per pass (after one warm-up token).
Result<BaselineResult> run_mmap_baseline(const gguf::GgufFile& file, int n_tokens, int n_threads,
                                         int64_t n_ctx);

}  // namespace hypura::eval
