// RMS norm's device code, shared by norm.cu and the fused norm-and-quantize kernel
// (fused.cu), so both compute the same floats.
#pragma once

#include "compute/cuda/common.cuh"

namespace hypura::compute::cuda {

constexpr int kNormThreads = 256;  // threads per row

// Blocks of kNormThreads values a row of n takes in the split kernels (the last one partial).
inline unsigned norm_chunks(int64_t n) {
  return static_cast<unsigned>((n + kNormThreads - 1) / kNormThreads);
}

// 1 / sqrt(mean(x^2) + eps) of row xr (n values), the sum of squares in double as on the
// CPU. All kNormThreads threads of the block call it; partial: kNormThreads / 32 doubles
// of shared memory.
__device__ __forceinline__ float row_rms_scale(const float* xr, int n, float eps, double* partial) {
  double sum = 0.0;
  if (n % 4 == 0 && reinterpret_cast<uintptr_t>(xr) % 16 == 0) {
    // 16-byte loads, four issued before the first is used (a decode row is a few of them
    // per thread, so their latency, not bandwidth, is the cost).
    const float4* x4 = reinterpret_cast<const float4*>(xr);
#pragma unroll 4
    for (int i = threadIdx.x; i < n / 4; i += kNormThreads) {
      const float4 v = x4[i];
      sum += static_cast<double>(v.x * v.x);
      sum += static_cast<double>(v.y * v.y);
      sum += static_cast<double>(v.z * v.z);
      sum += static_cast<double>(v.w * v.w);
    }
  } else {
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += kNormThreads) sum += static_cast<double>(xr[i] * xr[i]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  sum = 0.0;
  for (int k = 0; k < kNormThreads / 32; ++k) sum += partial[k];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  return 1.0f / sqrtf(mean + eps);
}

// Element i of the normed row (w may be null: no weight).
__device__ __forceinline__ float normed(const float* xr, const float* w, int i, float s) {
  return w ? (xr[i] * s) * w[i] : xr[i] * s;
}

}  // namespace hypura::compute::cuda
