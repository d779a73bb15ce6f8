// Activation quantizers. Each mirrors its CPU twin operation for operation: amax over the
// block, id = 127 / amax (Q8_0/Q8_1) or iscale = -127 / max (Q8_K, max the signed value of
// largest magnitude, the first one on ties), quants rounded half to even, scales rounded
// to fp16 where the CPU stores fp16. IEEE division and rounding (nvcc's defaults, no fast
// math) make the results bit-identical.
#include <cuda_fp16.h>

#include "compute/cuda/common.cuh"
#include "compute/cuda/quantize.h"
#include "compute/cuda/quantize_impl.cuh"

namespace hypura::compute::cuda {
namespace {

// One warp per 32-element block. with_sum: Q8_1 (s = d * sum(q), fp16).
template <bool kWithSum>
__global__ void quantize_q8_32(const float* __restrict__ x, int n_blocks, int8_t* __restrict__ q,
                               float* __restrict__ d, float* __restrict__ s) {
  const int b = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (b >= n_blocks) return;
  q8_32_warp<kWithSum>(x[b * 32 + lane], lane, q + b * 32, d + b, s + b);
}

// One 256-thread block per 256-element super-block.
__global__ void quantize_q8_k(const float* __restrict__ x, int8_t* __restrict__ q,
                              float* __restrict__ d) {
  __shared__ Q8kScratch scratch;
  const int b = blockIdx.x;
  q8k_block(x[b * 256 + threadIdx.x], q + b * 256, d + b, scratch);
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
