// Device-side helpers shared by the kernels: fp16 / bf16 decoding, warp reductions,
// loads of 4 bytes at the alignment a block format guarantees, and the 8-bit activation
// layout the quantized matrix-vector kernels read.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <utility>

#include "compute/cuda/act_q8.h"
#include "compute/cuda/device.h"
#include "quant/blocks.h"

// The kernels use the tensor cores' mma.sync and ldmatrix (HYPURA_CUDA_GENCODE's oldest
// target is compute_80).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "the CUDA kernels need sm_80 or later"
#endif

namespace hypura::compute::cuda {

// Programmatic dependent launch (sm_90; device.h's pdl_enabled). Every kernel launched by
// launch_kernel calls grid_dep_wait() before its first access to memory an earlier kernel
// of the stream writes or reads (nothing of it is visible before; a kernel that exits
// without waiting could finish before its predecessor), then grid_dep_launch() to let the
// next kernel's blocks start: they take the free multiprocessors and wait in turn. Both are
// no-ops without a programmatic dependency or on other architectures.
__device__ __forceinline__ void grid_dep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dep_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization
// when pdl_enabled() (the kernel must call grid_dep_wait()); captured into CUDA graphs as
// programmatic edges. A launch error is left for cudaGetLastError, as with <<<>>>.
template <class... KArgs, class... Args>
void launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                   StreamHandle stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Asks the L2 cache to fetch [p, p + bytes) for loads to come; holds no registers and
// returns nothing. p and bytes are multiples of 16. One bulk request on sm_90, a request
// per 128-byte line before it.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  for (uint32_t off = 0; off < bytes; off += 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(p) + off));
  }
#endif
}

// Tensor cores (sm_80 and later): c += a (16 x 16, row-major) . b (16 x 8, column-major),
// F16 in, F32 accumulators. Fragments of lane (g = lane / 4, t = lane % 4): a[0] = row g,
// columns 2t, 2t + 1; a[1] = row g + 8; a[2], a[3] = the same 8 columns on; b0 = rows (k)
// 2t, 2t + 1 of column g, b1 = 8 rows on; c[0], c[1] = row g, columns 2t, 2t + 1; c[2], c[3]
// = row g + 8.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a (16 x 32 int8, row-major) . b (32 x 8 int8, column-major), int32 accumulators. The
// fragments hold the same bytes as mma_16816's: a[0] = row g, bytes 4t..4t+3 of the row;
// a[1] = row g + 8; a[2], a[3] = 16 bytes on; b0 = bytes 4t..4t+3 of column g, b1 = 16 on.
__device__ __forceinline__ void mma_s8_16832(int (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a (16 x 16 int8, row-major) . b (16 x 8 int8, column-major), int32 accumulators:
// a0 = row g, bytes 4t..4t+3 of the row; a1 = row g + 8; b = bytes 4t..4t+3 of column g;
// c as mma_16816's.
__device__ __forceinline__ void mma_s8_16816(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(b));
}

// Two F16 halves packed as the fragments hold them (the lower column in the low bits).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float half_bits_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
// Round to fp16 and back, to nearest even (as quant::f32_to_fp16).
__device__ __forceinline__ float round_fp16(float v) {
  return __half2float(__float2half_rn(v));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Four bytes at p as a little-endian int; p is 2-byte aligned (legacy blocks, Q3_K, Q6_K).
__device__ __forceinline__ int load_int_a2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16));
}
__device__ __forceinline__ int load_int_a4(const uint8_t* p) {
  return *reinterpret_cast<const int*>(p);
}
__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

// Eight bytes at p as two little-endian ints, any alignment (MXFP4's 17-byte blocks): the
// aligned words that hold them, funnel-shifted (three 4-byte loads, not eight of a byte;
// the third only where p is unaligned, so no word past the eight bytes is read). Split in
// the loads (fetch_8_a1) and the shifts (join_8) for kernels that overlap the two.
struct Words8 {
  uint32_t w0, w1, w2, shift;
};
__device__ __forceinline__ Words8 fetch_8_a1(const uint8_t* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const uint32_t*>(addr & ~uintptr_t{3});
  const auto shift = static_cast<uint32_t>(addr & 3) * 8;
  return {w[0], w[1], shift != 0 ? w[2] : 0u, shift};
}
__device__ __forceinline__ void join_8(const Words8& w, int (&v)[2]) {
  v[0] = static_cast<int>(__funnelshift_r(w.w0, w.w1, w.shift));
  v[1] = static_cast<int>(__funnelshift_r(w.w1, w.w2, w.shift));
}
__device__ __forceinline__ void load_8_a1(const uint8_t* p, int (&v)[2]) {
  join_8(fetch_8_a1(p), v);
}

// MXFP4's scale: 2^(e - 128) for the E8M0 byte e (quant::e8m0_half_to_f32).
__device__ __forceinline__ float e8m0_half_to_float(uint32_t e) {
  return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// The doubled E2M1 values (quant::kMxfp4Values) of four 4-bit codes, one per byte of
// codes: the magnitude of code & 7 picked by a byte permute of the table {0, 1, 2, 3, 4, 6,
// 8, 12}, negated where bit 3 is set.
__device__ __forceinline__ int mxfp4_values4(uint32_t codes) {
  const uint32_t m = codes & 0x07070707u;
  const uint32_t t = m | (m >> 4);  // selector nibbles: byte k's index at bits 4k..4k+2
  const uint32_t sel = (t & 0xFFu) | ((t >> 8) & 0xFF00u);
  const uint32_t mag = __byte_perm(0x03020100u, 0x0C080604u, sel);
  const uint32_t neg = ((codes >> 3) & 0x01010101u) * 0xFFu;
  return static_cast<int>((mag & ~neg) | (__vneg4(mag) & neg));
}

// Sum of the four signed bytes of v (dp4a against ones).
__device__ __forceinline__ int byte_sum(int v, int acc) {
  return __dp4a(v, 0x01010101, acc);
}

// Bits 0..3 of h to bit 4 of bytes 0..3 (the fifth bit of four Q5 quants).
__device__ __forceinline__ int spread_bits4(uint32_t h) {
  return static_cast<int>(((h * 0x00204081u) & 0x01010101u) << 4);
}

}  // namespace hypura::compute::cuda
