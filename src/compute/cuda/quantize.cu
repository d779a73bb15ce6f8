// Activation quantizers. Each mirrors its CPU twin operation for operation: amax over the
// block, id = 127 / amax (Q8_0/Q8_1) or iscale = -127 / max (Q8_K, max the signed value of
// largest magnitude, the first one on ties), quants rounded half to even, scales rounded
// to fp16 where the CPU stores fp16. IEEE division and rounding (nvcc's defaults, no fast
// math) make the results bit-identical.
#include <cuda_fp16.h>

#include "compute/cuda/common.cuh"
#include "compute/cuda/quantize.h"

namespace hypura::compute::cuda {
namespace {

// One warp per 32-element block. with_sum: Q8_1 (s = d * sum(q), fp16).
template <bool kWithSum>
__global__ void quantize_q8_32(const float* __restrict__ x, int n_blocks, int8_t* __restrict__ q,
                               float* __restrict__ d, float* __restrict__ s) {
  const int b = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (b >= n_blocks) return;
  const float v = x[b * 32 + lane];
  const float amax = warp_max(fabsf(v));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const int qi = static_cast<int>(rintf(v * id));
  q[b * 32 + lane] = static_cast<int8_t>(qi);
  const float dv = amax / 127.0f;
  if (kWithSum) {
    const int sum = warp_sum_int(qi);
    if (lane == 0) s[b] = round_fp16(dv * static_cast<float>(sum));
  }
  if (lane == 0) d[b] = round_fp16(dv);
}

// One 256-thread block per 256-element super-block.
__global__ void quantize_q8_k(const float* __restrict__ x, int8_t* __restrict__ q,
                              float* __restrict__ d) {
  __shared__ float s_amax[8];
  __shared__ int s_idx[8];
  const int b = blockIdx.x, t = threadIdx.x, lane = t % 32, warp = t / 32;
  const float v = x[b * 256 + t];
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
    s_amax[warp] = a;
    s_idx[warp] = idx;
  }
  __syncthreads();
  a = s_amax[0];
  idx = s_idx[0];
  for (int w = 1; w < 8; ++w) {
    if (s_amax[w] > a) {  // warps in index order: equal maxima keep the earlier one
      a = s_amax[w];
      idx = s_idx[w];
    }
  }
  if (a == 0.0f) {
    q[b * 256 + t] = 0;
    if (t == 0) d[b] = 0.0f;
    return;
  }
  const float max = x[b * 256 + idx];
  const float iscale = -127.0f / max;
  q[b * 256 + t] = static_cast<int8_t>(min(127, __float2int_rn(iscale * v)));
  if (t == 0) d[b] = 1.0f / iscale;
}

__global__ void q8_to_f16_kernel(const int8_t* __restrict__ q, const float* __restrict__ d, int64_t n,
                                 int block, __half* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(static_cast<float>(q[i]) * d[i / block]);
}

}  // namespace

void act_q8_to_f16(const ActQ8& act, int64_t n, int block, uint16_t* out, StreamHandle stream) {
  if (n == 0) return;
  q8_to_f16_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      act.q, act.d, n, block, reinterpret_cast<__half*>(out));
}

ActQ8 quantize_act(ActFormat format, const float* x, int64_t n, void* scratch, StreamHandle stream) {
  const ActQ8Layout l = act_q8_layout(n);
  auto* base = static_cast<uint8_t*>(scratch);
  auto* q = reinterpret_cast<int8_t*>(base + l.q);
  auto* d = reinterpret_cast<float*>(base + l.d);
  auto* s = reinterpret_cast<float*>(base + l.s);
  if (format == ActFormat::kQ8_K) {
    quantize_q8_k<<<static_cast<unsigned>(n / 256), 256, 0, stream>>>(x, q, d);
  } else {
    const int n_blocks = static_cast<int>(n / 32);
    const unsigned grid = static_cast<unsigned>((n_blocks + 7) / 8);
    if (format == ActFormat::kQ8_1) {
      quantize_q8_32<true><<<grid, 256, 0, stream>>>(x, n_blocks, q, d, s);
    } else {
      quantize_q8_32<false><<<grid, 256, 0, stream>>>(x, n_blocks, q, d, s);
    }
  }
  return ActQ8{q, d, s, x};
}

}  // namespace hypura::compute::cuda
