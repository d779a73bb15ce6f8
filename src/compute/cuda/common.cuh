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
// the third only where p is unaligned, so no word past the eight bytes is read).
__device__ __forceinline__ void load_8_a1(const uint8_t* p, int (&v)[2]) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const uint32_t*>(addr & ~uintptr_t{3});
  const auto shift = static_cast<uint32_t>(addr & 3) * 8;
  const uint32_t w0 = w[0], w1 = w[1], w2 = shift != 0 ? w[2] : 0u;
  v[0] = static_cast<int>(__funnelshift_r(w0, w1, shift));
  v[1] = static_cast<int>(__funnelshift_r(w1, w2, shift));
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
