// Elementwise arithmetic on n device floats, the twins of compute::add, mul and scale.
#pragma once

#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

void add(float* y, const float* x, int64_t n, StreamHandle stream);  // y += x
void mul(float* y, const float* x, int64_t n, StreamHandle stream);  // y *= x
void scale(float* y, float s, int64_t n, StreamHandle stream);       // y *= s
// y[r, :] += b for r < n_rows: a bias (width floats) added to every row.
void add_rows(float* y, const float* b, int64_t n_rows, int64_t width, StreamHandle stream);

}  // namespace hypura::compute::cuda
