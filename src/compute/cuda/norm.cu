#include "compute/cuda/common.cuh"
#include "compute/cuda/norm.h"

namespace hypura::compute::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, int n,
                                float eps, float* out) {
  __shared__ double partial[kThreads / 32];
  const float* xr = x + static_cast<size_t>(blockIdx.x) * n;
  float* yr = out + static_cast<size_t>(blockIdx.x) * n;
  double sum = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) sum += static_cast<double>(xr[i] * xr[i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  sum = 0.0;
  for (int k = 0; k < kThreads / 32; ++k) sum += partial[k];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float s = 1.0f / sqrtf(mean + eps);
  for (int i = threadIdx.x; i < n; i += kThreads) yr[i] = w ? (xr[i] * s) * w[i] : xr[i] * s;
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* out,
              StreamHandle stream) {
  if (n_rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(x, w, static_cast<int>(n),
                                                                          eps, out);
}

}  // namespace hypura::compute::cuda
