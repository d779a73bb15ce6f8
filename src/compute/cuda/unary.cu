#include "compute/cuda/common.cuh"
#include "compute/cuda/unary.h"

namespace hypura::compute::cuda {
namespace {

__device__ __forceinline__ float gelu_tanh_one(float v) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * v * (1.0f + kCoefA * v * v)));
}

template <UnaryOp kOp>
__global__ void unary_kernel(float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  if constexpr (kOp == UnaryOp::kSilu) {
    x[i] = v / (1.0f + expf(-v));
  } else if constexpr (kOp == UnaryOp::kGeluTanh) {
    x[i] = gelu_tanh_one(v);
  } else {
    if (v <= -10.0f) {
      x[i] = 0.0f;
    } else if (v < 10.0f) {
      x[i] = round_fp16(gelu_tanh_one(round_fp16(v)));
    }
  }
}

}  // namespace

void unary(UnaryOp op, float* x, int64_t n, StreamHandle stream) {
  if (n == 0) return;
  const unsigned grid = static_cast<unsigned>((n + 255) / 256);
  switch (op) {
    case UnaryOp::kSilu: unary_kernel<UnaryOp::kSilu><<<grid, 256, 0, stream>>>(x, n); break;
    case UnaryOp::kGeluTanh: unary_kernel<UnaryOp::kGeluTanh><<<grid, 256, 0, stream>>>(x, n); break;
    case UnaryOp::kGeluTanhFp16:
      unary_kernel<UnaryOp::kGeluTanhFp16><<<grid, 256, 0, stream>>>(x, n);
      break;
  }
}

}  // namespace hypura::compute::cuda
