// The row softmax shared by softmax.cu and the MoE routing kernel (moe.cu): max, then
// exp(x - max) summed in double, as the CPU's compute::softmax; a fully masked row becomes
// zeros.
#pragma once

#include "compute/cuda/common.cuh"

namespace hypura::compute::cuda {

constexpr int kSoftmaxThreads = 256;

// Row xr (n floats) in place, by a block of kSoftmaxThreads threads, every one of which
// calls it (it synchronizes the block).
__device__ __forceinline__ void softmax_row(float* xr, int n) {
  __shared__ float s_max[kSoftmaxThreads / 32];
  __shared__ double s_sum[kSoftmaxThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += kSoftmaxThreads) m = fmaxf(m, xr[i]);
  m = warp_max(m);
  if (lane == 0) s_max[warp] = m;
  __syncthreads();
  m = s_max[0];
  for (int k = 1; k < kSoftmaxThreads / 32; ++k) m = fmaxf(m, s_max[k]);
  if (m == -INFINITY) {  // every entry masked
    for (int i = threadIdx.x; i < n; i += kSoftmaxThreads) xr[i] = 0.0f;
    return;
  }
  double sum = 0.0;
  for (int i = threadIdx.x; i < n; i += kSoftmaxThreads) {
    const float e = expf(xr[i] - m);
    xr[i] = e;
    sum += static_cast<double>(e);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) s_sum[warp] = sum;
  __syncthreads();
  sum = 0.0;
  for (int k = 0; k < kSoftmaxThreads / 32; ++k) sum += s_sum[k];
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = threadIdx.x; i < n; i += kSoftmaxThreads) xr[i] *= inv;
}

}  // namespace hypura::compute::cuda
