#include "compute/cuda/binary.h"
#include "compute/cuda/common.cuh"

namespace hypura::compute::cuda {
namespace {

enum class BinOp { kAdd, kMul, kScale };

template <BinOp kOp>
__global__ void binary_kernel(float* y, const float* x, float s, int64_t n) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if constexpr (kOp == BinOp::kAdd) y[i] += x[i];
  if constexpr (kOp == BinOp::kMul) y[i] *= x[i];
  if constexpr (kOp == BinOp::kScale) y[i] *= s;
}

template <BinOp kOp>
void launch(float* y, const float* x, float s, int64_t n, StreamHandle stream) {
  if (n == 0) return;
  launch_kernel(binary_kernel<kOp>, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, y, x, s,
                n);
}

__global__ void add_rows_kernel(float* y, const float* b, int64_t n, int64_t width) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += b[i % width];
}

}  // namespace

void add_rows(float* y, const float* b, int64_t n_rows, int64_t width, StreamHandle stream) {
  const int64_t n = n_rows * width;
  if (n == 0) return;
  launch_kernel(add_rows_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, y, b, n,
                width);
}

void add(float* y, const float* x, int64_t n, StreamHandle stream) {
  launch<BinOp::kAdd>(y, x, 0.0f, n, stream);
}
void mul(float* y, const float* x, int64_t n, StreamHandle stream) {
  launch<BinOp::kMul>(y, x, 0.0f, n, stream);
}
void scale(float* y, float s, int64_t n, StreamHandle stream) {
  launch<BinOp::kScale>(y, nullptr, s, n, stream);
}

}  // namespace hypura::compute::cuda
