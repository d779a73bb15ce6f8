#include "compute/cuda/binary.h"
#include "compute/cuda/common.cuh"

namespace hypura::compute::cuda {
namespace {

enum class BinOp { kAdd, kMul, kScale };

template <BinOp kOp>
__global__ void binary_kernel(float* y, const float* x, float s, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if constexpr (kOp == BinOp::kAdd) y[i] += x[i];
  if constexpr (kOp == BinOp::kMul) y[i] *= x[i];
  if constexpr (kOp == BinOp::kScale) y[i] *= s;
}

template <BinOp kOp>
void launch(float* y, const float* x, float s, int64_t n, StreamHandle stream) {
  if (n == 0) return;
  binary_kernel<kOp><<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(y, x, s, n);
}

}  // namespace

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
