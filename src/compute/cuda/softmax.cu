#include "compute/cuda/common.cuh"
#include "compute/cuda/softmax.h"

namespace hypura::compute::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void softmax_kernel(float* x, int n) {
  __shared__ float s_max[kThreads / 32];
  __shared__ double s_sum[kThreads / 32];
  float* xr = x + static_cast<size_t>(blockIdx.x) * n;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, xr[i]);
  m = warp_max(m);
  if (lane == 0) s_max[warp] = m;
  __syncthreads();
  m = s_max[0];
  for (int k = 1; k < kThreads / 32; ++k) m = fmaxf(m, s_max[k]);
  if (m == -INFINITY) {  // every entry masked
    for (int i = threadIdx.x; i < n; i += kThreads) xr[i] = 0.0f;
    return;
  }
  double sum = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float e = expf(xr[i] - m);
    xr[i] = e;
    sum += static_cast<double>(e);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) s_sum[warp] = sum;
  __syncthreads();
  sum = 0.0;
  for (int k = 0; k < kThreads / 32; ++k) sum += s_sum[k];
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = threadIdx.x; i < n; i += kThreads) xr[i] *= inv;
}

}  // namespace

void softmax(float* x, int64_t n_rows, int64_t n, StreamHandle stream) {
  if (n_rows == 0) return;
  softmax_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(x, static_cast<int>(n));
}

}  // namespace hypura::compute::cuda
