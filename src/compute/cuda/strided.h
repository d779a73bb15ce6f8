// Ops on a column range of wider rows, on the GPU: multi-head latent attention (deepseek2)
// keeps a key's latent and rotary parts side by side in one row, and each query head's
// absorbed and rotary parts likewise.
#pragma once

#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

// dst[r * dst_stride + c] = src[r * src_stride + c] for r < n_rows, c < width (device
// floats; the two ranges do not overlap).
void copy_cols(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t n_rows,
               int64_t width, StreamHandle stream);

// rms_norm (norm.h) in place of the first n values of each of n_rows rows, rows `stride`
// floats apart: the same floats as rms_norm of those values as rows of their own.
void rms_norm_cols(float* x, int64_t n_rows, int64_t stride, int64_t n, const float* w, float eps,
                   StreamHandle stream);

}  // namespace hypura::compute::cuda
