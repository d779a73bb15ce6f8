// The activation quantizers' device functions, shared by quantize.cu and the fused kernels
// (fused.cu) that quantize a value they have just computed. Each mirrors its CPU twin
// operation for operation (see quantize.cu): the fused kernels' quants are the same bytes.
#pragma once

#include "compute/cuda/common.cuh"

namespace hypura::compute::cuda {

// A value's quant and its block's scale (as stored: Q8_0 / Q8_1 fp16-rounded, widened).
struct Q8Value {
  int q;
  float d;
};

// Q8_0 (kWithSum = false) or Q8_1 of one 32-element block held one value per lane of a
// warp: lane's quant and the block's d; *s (Q8_1, when s is not null) from lane 0. All 32
// lanes call it.
template <bool kWithSum>
__device__ __forceinline__ Q8Value q8_32_compute(float v, int lane, float* s) {
  const float amax = warp_max(fabsf(v));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const int qi = static_cast<int>(rintf(v * id));
  const float dv = amax / 127.0f;
  if (kWithSum) {
    const int sum = warp_sum_int(qi);
    if (lane == 0 && s != nullptr) *s = round_fp16(dv * static_cast<float>(sum));
  }
  return {qi, round_fp16(dv)};
}

// As q8_32_compute, storing q (32) and *d.
template <bool kWithSum>
__device__ __forceinline__ void q8_32_warp(float v, int lane, int8_t* q, float* d, float* s) {
  const Q8Value r = q8_32_compute<kWithSum>(v, lane, s);
  q[lane] = static_cast<int8_t>(r.q);
  if (lane == 0) *d = r.d;
}

struct Q8kScratch {
  float amax[8];
  int idx[8];
  float value[256];
};

// Q8_K of one 256-element super-block held one value per thread of a 256-thread block
// (thread t: element t): the thread's quant and the block's d. All 256 threads call it
// (it has barriers).
__device__ __forceinline__ Q8Value q8k_compute(float v, Q8kScratch& sh) {
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  sh.value[t] = v;
  // Largest |x|, lowest index on ties (the CPU keeps the first strict maximum).
  float a = fabsf(v);
  int idx = t;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float oa = __shfl_xor_sync(0xffffffffu, a, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (oa > a || (oa == a && oi < idx)) {
      a = oa;
      idx = oi;
    }
  }
  if (lane == 0) {
    sh.amax[warp] = a;
    sh.idx[warp] = idx;
  }
  __syncthreads();
  a = sh.amax[0];
  idx = sh.idx[0];
  for (int w = 1; w < 8; ++w) {
    if (sh.amax[w] > a) {  // warps in index order: equal maxima keep the earlier one
      a = sh.amax[w];
      idx = sh.idx[w];
    }
  }
  const float max = sh.value[idx];
  __syncthreads();  // the scratch may be reused by the caller's next block
  if (a == 0.0f) return {0, 0.0f};
  const float iscale = -127.0f / max;
  return {min(127, __float2int_rn(iscale * v)), 1.0f / iscale};
}

// As q8k_compute, storing q (256) and *d.
__device__ __forceinline__ void q8k_block(float v, int8_t* q, float* d, Q8kScratch& sh) {
  const Q8Value r = q8k_compute(v, sh);
  q[threadIdx.x] = static_cast<int8_t>(r.q);
  if (threadIdx.x == 0) *d = r.d;
}

}  // namespace hypura::compute::cuda
