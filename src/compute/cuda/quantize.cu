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
  grid_dep_wait();
  grid_dep_launch();
  const int b = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (b >= n_blocks) return;
  q8_32_warp<kWithSum>(x[b * 32 + lane], lane, q + b * 32, d + b, s + b);
}

// One 256-thread block per 256-element super-block.
__global__ void quantize_q8_k(const float* __restrict__ x, int8_t* __restrict__ q,
                              float* __restrict__ d) {
  __shared__ Q8kScratch scratch;
  grid_dep_wait();
  grid_dep_launch();
  const int b = blockIdx.x;
  q8k_block(x[b * 256 + threadIdx.x], q + b * 256, d + b, scratch);
}

// One 256-thread block per 256 values: each value's quant times its block's scale, in F16.
// (Q8_0 / Q8_1: the last block may be partial, whole warps past the end return.)
template <ActFormat kFormat>
__global__ void __launch_bounds__(256)
    quantize_to_f16_kernel(const float* __restrict__ x, int64_t n, __half* __restrict__ out) {
  __shared__ Q8kScratch sh;
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  Q8Value r;
  if constexpr (kFormat == ActFormat::kQ8_K) {
    r = q8k_compute(x[i], sh);
  } else {
    if (i - threadIdx.x % 32 >= n) return;  // uniform per warp (n % 32 == 0)
    r = q8_32_compute<kFormat == ActFormat::kQ8_1>(x[i], threadIdx.x % 32, nullptr);
  }
  out[i] = __float2half_rn(static_cast<float>(r.q) * r.d);
}

}  // namespace

void quantize_to_f16(ActFormat format, const float* x, int64_t n, uint16_t* out,
                     StreamHandle stream) {
  if (n == 0) return;
  const unsigned grid = static_cast<unsigned>((n + 255) / 256);
  auto* o = reinterpret_cast<__half*>(out);
  switch (format) {
    case ActFormat::kQ8_K:
      launch_kernel(quantize_to_f16_kernel<ActFormat::kQ8_K>, grid, 256, 0, stream, x, n, o);
      break;
    case ActFormat::kQ8_0:
      launch_kernel(quantize_to_f16_kernel<ActFormat::kQ8_0>, grid, 256, 0, stream, x, n, o);
      break;
    case ActFormat::kQ8_1:
      launch_kernel(quantize_to_f16_kernel<ActFormat::kQ8_1>, grid, 256, 0, stream, x, n, o);
      break;
  }
}

ActQ8 quantize_act(ActFormat format, const float* x, int64_t n, void* scratch,
                   StreamHandle stream) {
  const ActQ8Layout l = act_q8_layout(n);
  auto* base = static_cast<uint8_t*>(scratch);
  auto* q = reinterpret_cast<int8_t*>(base + l.q);
  auto* d = reinterpret_cast<float*>(base + l.d);
  auto* s = reinterpret_cast<float*>(base + l.s);
  if (format == ActFormat::kQ8_K) {
    launch_kernel(quantize_q8_k, static_cast<unsigned>(n / 256), 256, 0, stream, x, q, d);
  } else {
    const int n_blocks = static_cast<int>(n / 32);
    const unsigned grid = static_cast<unsigned>((n_blocks + 7) / 8);
    if (format == ActFormat::kQ8_1) {
      launch_kernel(quantize_q8_32<true>, grid, 256, 0, stream, x, n_blocks, q, d, s);
    } else {
      launch_kernel(quantize_q8_32<false>, grid, 256, 0, stream, x, n_blocks, q, d, s);
    }
  }
  return ActQ8{q, d, s, x};
}

}  // namespace hypura::compute::cuda
