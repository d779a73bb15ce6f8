// The decode rate probe: how fast this machine's CPU kernels read resident weights for one
// token, the speed of a generated token's matrix-vector products.
//
// Memory bandwidth alone does not say it: a many-core server's Q4_K decode is bound by the
// memory bus, but a 2-core VM's by the kernels' arithmetic (the synthetic 8b read 17.5 GB/s
// there while the bus gave 28 GB/s). The planner predicts with this figure per weight type
// (scheduler/cost.cc), the profile measures it (profiler/), bench re-measures it.
//
// Thread-safety: uses the context's pool like any product (one job at a time).
#pragma once

#include <cstdint>

#include "compute/compute.h"
#include "gguf/gguf.h"

namespace hypura::compute {

// What one token's product with a matrix of `type` weights costs on every thread of ctx:
// bytes / bps + overhead_s. The overhead is what a product pays whatever its size (waking
// the pool, quantizing the activation, the closing barrier, the first rows' trip to RAM):
// about 7 us on the 2-core Xeon VM, a tenth of a 4 MiB product, and the reason a model of
// many small matrices decodes slower than its bytes at the streaming rate say.
struct DecodeCost {
  double bps = 0;         // weight bytes per second, streaming from RAM
  double overhead_s = 0;  // seconds per product beyond its bytes
};

// Measures DecodeCost for `type` at rows of n_cols columns (0: kDecodeProbeCols; a
// multiple of the type's block), one random row repeated over a buffer of `bytes` given
// transparent huge pages as resident weights are, from two rings of distinct matrices
// over the buffer, so every product reads from RAM: wide ones (kDecodeProbeWideRows rows
// at kDecodeProbeCols, as many bytes at other widths, times half the threads beyond two)
// and narrow ones
// (kDecodeProbeNarrowRows rows), the median product of each over half of `seconds`; the
// line through the two points gives the rate (its slope) and the overhead (its
// intercept). Zero when ctx has no kernels for `type` or the buffer cannot be allocated.
DecodeCost measure_decode_cost(Context& ctx, gguf::GgmlType type, int64_t n_cols, uint64_t bytes,
                               double seconds);

inline constexpr int64_t kDecodeProbeWideRows = 2048;
inline constexpr int64_t kDecodeProbeNarrowRows = 64;
inline constexpr int64_t kDecodeProbeCols = 4096;

}  // namespace hypura::compute
