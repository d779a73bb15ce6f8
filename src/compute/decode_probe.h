// The decode rate probe: how fast this machine's CPU kernels read resident weights for one
// token, the speed of a generated token's matrix-vector products.
//
// Memory bandwidth alone does not say it: a many-core server's Q4_K decode is bound by the
// memory bus, but a 2-core VM's by the kernels' arithmetic (the synthetic 8b read 17.5 GB/s
// there while the bus gave 28 GB/s). The planner predicts with this figure per weight type
// (scheduler/planner.cc), the profile measures it (profiler/), bench re-measures it.
//
// Thread-safety: uses the context's pool like any product (one job at a time).
#pragma once

#include <cstdint>

#include "compute/compute.h"
#include "gguf/gguf.h"

namespace hypura::compute {

// Weight bytes per second that ctx.matmul() reads for one token from a matrix of `bytes`
// of `type` weights (rows of kDecodeProbeCols columns, one random row repeated, the buffer
// given transparent huge pages as resident weights are), on every thread of ctx: the median
// pass of about `seconds`. Bigger than the caches, it includes the trip to RAM. 0 when
// ctx has no kernels for `type` or the buffer cannot be allocated.
double decode_bytes_per_second(Context& ctx, gguf::GgmlType type, uint64_t bytes, double seconds);

inline constexpr int64_t kDecodeProbeCols = 4096;

}  // namespace hypura::compute
