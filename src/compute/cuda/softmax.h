// Row softmax on the GPU, the twin of compute::softmax (max, exp, sum in double, scale by
// the float reciprocal; a row of -inf only becomes zeros).
#pragma once

#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

// x: (n_rows, n) device floats, softmax of each row in place.
void softmax(float* x, int64_t n_rows, int64_t n, StreamHandle stream);

}  // namespace hypura::compute::cuda
