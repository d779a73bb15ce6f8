// Fused kernels of the decode path: an op and the quantization of its result for the next
// products in one launch, so a small kernel and a pass over the row disappear. Each writes
// exactly what its two unfused kernels write (the same float operations, the same quants).
//
// All pointers are device memory; work is queued on `stream`.
#pragma once

#include <cstdint>

#include "compute/cuda/act_q8.h"
#include "compute/cuda/device.h"
#include "compute/cuda/quantize.h"
#include "compute/cuda/unary.h"

namespace hypura::compute::cuda {

// Whether rms_norm_quantize takes rows of n in `format`: n % 256 == 0 for Q8_K, n % 32 == 0
// for Q8_0 / Q8_1.
bool norm_quantize_fits(ActFormat format, int64_t n);
// rms_norm() of n_rows rows of n into out, then quantize_act(format) of out (n_rows * n
// values) into scratch. REQUIRES: norm_quantize_fits(format, n); out does not alias x.
ActQ8 rms_norm_quantize(const float* x, const float* w, int64_t n_rows, int64_t n, float eps,
                        float* out, ActFormat format, void* scratch, StreamHandle stream);

// glu(op, gate, up, n) then quantize_act(format) of gate. REQUIRES: n % 256 == 0.
ActQ8 glu_quantize(UnaryOp op, float* gate, const float* up, int64_t n, ActFormat format,
                   void* scratch, StreamHandle stream);

}  // namespace hypura::compute::cuda
