// RMS norm of rows on the GPU, the twin of compute::rms_norm: the sum of squares is
// accumulated in double as on the CPU, so results match to float rounding.
#pragma once

#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w for r < n_rows. x, out: (n_rows, n)
// device floats (out may alias x); w: (n) device floats or nullptr (no scale).
void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* out,
              StreamHandle stream);

}  // namespace hypura::compute::cuda
