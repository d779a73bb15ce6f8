// Dequantizers: one thread per 8 consecutive elements of a row (8 elements never straddle
// a sub-block, so a thread decodes its scales once). Products and sums use __fmul_rn /
// __fsub_rn / __fadd_rn so nvcc does not contract them into FMAs: the CPU rounds each.
#include <cuda_fp16.h>

#include "compute/cuda/common.cuh"
#include "compute/cuda/dequant_launch.h"

namespace hypura::compute::cuda {
namespace {

using quant::kQK;
using quant::kQK_K;

__device__ __forceinline__ uint32_t load_u32_a4(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
__device__ __forceinline__ float h2f(const uint8_t* p) {
  return half_bits_to_float(load_u16(p));
}
// d * q + m and d * q - m, rounded twice as on the CPU.
__device__ __forceinline__ float mul_add(float d, int q, float m) {
  return __fadd_rn(__fmul_rn(d, static_cast<float>(q)), m);
}
__device__ __forceinline__ float mul_sub(float d, int q, float m) {
  return __fsub_rn(__fmul_rn(d, static_cast<float>(q)), m);
}

// Each format: kBlockBytes, kBlockElems and dequant8(block, i0, out): elements i0..i0+7.
struct DqQ4_0 {
  static constexpr int kBlockBytes = 18, kBlockElems = kQK;
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    const float d = h2f(b);
    for (int k = 0; k < 8; ++k) {
      const int i = i0 + k;
      v[k] = __fmul_rn(static_cast<float>(((b[2 + i % 16] >> (4 * (i / 16))) & 0xF) - 8), d);
    }
  }
};
struct DqQ4_1 {
  static constexpr int kBlockBytes = 20, kBlockElems = kQK;
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    const float d = h2f(b), m = h2f(b + 2);
    for (int k = 0; k < 8; ++k) {
      const int i = i0 + k;
      v[k] = mul_add(d, (b[4 + i % 16] >> (4 * (i / 16))) & 0xF, m);
    }
  }
};
// Q5_0 (kMin = false: d (q - 16)) and Q5_1 (d q + m).
template <bool kMin>
struct DqQ5 {
  static constexpr int kBlockBytes = kMin ? 24 : 22, kBlockElems = kQK;
  static constexpr int kQh = kMin ? 4 : 2, kQs = kQh + 4;
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    const float d = h2f(b);
    const uint32_t qh = static_cast<uint32_t>(load_int_a2(b + kQh));
    for (int k = 0; k < 8; ++k) {
      const int i = i0 + k;
      const int q =
          ((b[kQs + i % 16] >> (4 * (i / 16))) & 0xF) | static_cast<int>(((qh >> i) & 1) << 4);
      if constexpr (kMin) {
        v[k] = mul_add(d, q, h2f(b + 2));
      } else {
        v[k] = __fmul_rn(d, static_cast<float>(q - 16));
      }
    }
  }
};
struct DqQ8_0 {
  static constexpr int kBlockBytes = 34, kBlockElems = kQK;
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    const float d = h2f(b);
    for (int k = 0; k < 8; ++k) {
      v[k] = __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + i0 + k])), d);
    }
  }
};
// Elements i0..i0+7 are the low (i0 < 16) or high nibbles of 8 consecutive code bytes:
// two words of four codes, each turned into its doubled E2M1 values by mxfp4_values4.
struct DqMXFP4 {
  static constexpr int kBlockBytes = 17, kBlockElems = kQK;
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    const float d = e8m0_half_to_float(b[0]);
    const uint8_t* q = b + 1 + i0 % 16;
    const int shift = 4 * (i0 / 16);
    for (int w = 0; w < 2; ++w) {
      const uint32_t bytes = q[4 * w] | (q[4 * w + 1] << 8) | (q[4 * w + 2] << 16) |
                             (static_cast<uint32_t>(q[4 * w + 3]) << 24);
      const int vals = mxfp4_values4((bytes >> shift) & 0x0F0F0F0Fu);
      for (int k = 0; k < 4; ++k) {
        v[4 * w + k] = __fmul_rn(static_cast<float>(static_cast<int8_t>(vals >> (8 * k))), d);
      }
    }
  }
};
struct DqQ2_K {
  static constexpr int kBlockBytes = 84, kBlockElems = kQK_K;
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    const uint8_t sc = b[i0 / 16];
    const float dl = __fmul_rn(h2f(b + 80), static_cast<float>(sc & 0xF));
    const float ml = __fmul_rn(h2f(b + 82), static_cast<float>(sc >> 4));
    const int c = i0 / 128, s = (i0 % 128) / 32;
    for (int k = 0; k < 8; ++k) {
      const int m = (i0 + k) % 32;
      v[k] = mul_sub(dl, (b[16 + c * 32 + m] >> (2 * s)) & 3, ml);
    }
  }
};
struct DqQ3_K {
  static constexpr int kBlockBytes = 110, kBlockElems = kQK_K;
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    const int j = i0 / 16;  // the 6-bit scale: low nibble, then 2 high bits
    const uint8_t* packed = b + 96;
    const int low = (packed[j % 8] >> (4 * (j / 8))) & 0xF;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    const float dl = __fmul_rn(h2f(b + 108), static_cast<float>((low | (high << 4)) - 32));
    const int c = i0 / 128, s = (i0 % 128) / 32;
    for (int k = 0; k < 8; ++k) {
      const int i = i0 + k, m = i % 32;
      const int q = (b[32 + c * 32 + m] >> (2 * s)) & 3;
      const int hbit = (b[m] >> (i / 32)) & 1;
      v[k] = __fmul_rn(dl, static_cast<float>(q - (hbit ? 0 : 4)));
    }
  }
};
// Q4_K (kFive = false) and Q5_K.
template <bool kFive>
struct DqK4 {
  static constexpr int kBlockBytes = kFive ? 176 : 144, kBlockElems = kQK_K;
  static constexpr int kQs = kFive ? 48 : 16;
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    const int j = i0 / 32;
    const uint8_t* q = b + 4;
    int sc, mn;
    if (j < 4) {
      sc = q[j] & 63;
      mn = q[j + 4] & 63;
    } else {
      sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
    const float dl = __fmul_rn(h2f(b), static_cast<float>(sc));
    const float ml = __fmul_rn(h2f(b + 2), static_cast<float>(mn));
    // The 8 quant bytes (and Q5_K's 8 high-bit bytes) as two aligned words each: blocks,
    // their fields and i0 % 32 are multiples of 4 bytes.
    const int l0 = i0 % 32;
    const uint8_t* qs = b + kQs + (j / 2) * 32 + l0;
    const uint32_t lo[2] = {load_u32_a4(qs), load_u32_a4(qs + 4)};
    uint32_t hi[2] = {0, 0};
    if constexpr (kFive) {
      hi[0] = load_u32_a4(b + 16 + l0);
      hi[1] = load_u32_a4(b + 20 + l0);
    }
    for (int k = 0; k < 8; ++k) {
      const int sh = 8 * (k % 4);
      int val = static_cast<int>((lo[k / 4] >> (sh + 4 * (j % 2))) & 0xF);
      if constexpr (kFive) val |= static_cast<int>(((hi[k / 4] >> (sh + j)) & 1) << 4);
      v[k] = mul_sub(dl, val, ml);
    }
  }
};
struct DqQ6_K {
  static constexpr int kBlockBytes = 210, kBlockElems = kQK_K;
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    const float dl =
        __fmul_rn(h2f(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + i0 / 16])));
    const int c = i0 / 128, h = (i0 % 128) / 64, s = (i0 % 128) / 32;
    for (int k = 0; k < 8; ++k) {
      const int i = i0 + k;
      const int low = (b[c * 64 + i % 64] >> (4 * h)) & 0xF;
      const int high = (b[128 + c * 32 + i % 32] >> (2 * s)) & 3;
      v[k] = __fmul_rn(dl, static_cast<float>((low | (high << 4)) - 32));
    }
  }
};

template <class OutT>
__device__ __forceinline__ void store(OutT* out, float v) {
  if constexpr (sizeof(OutT) == 2) {
    *reinterpret_cast<uint16_t*>(out) = __half_as_ushort(__float2half_rn(v));
  } else {
    *out = v;
  }
}

// Rows of a quantized matrix; thread g takes elements 8 (g % groups) .. + 7 of output row
// g / groups (source row ids[r], or row0 + r).
// Index is the type of the group index: 32-bit division where the groups fit (a 64-bit
// division costs more than the thread's bytes).
template <class F, class OutT, class Index>
__global__ void dequant_kernel(const uint8_t* __restrict__ w, size_t row_bytes,
                               const int32_t* __restrict__ ids, int64_t row0, int n_cols,
                               int64_t n_groups, OutT* __restrict__ out) {
  grid_dep_wait();
  grid_dep_launch();
  const Index g = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  const Index groups = static_cast<Index>(n_cols / 8);
  if (static_cast<int64_t>(g) >= n_groups) return;
  const auto r = static_cast<int64_t>(g / groups);
  const int e0 = static_cast<int>(g % groups) * 8;
  const int64_t src = ids != nullptr ? ids[r] : row0 + r;
  const uint8_t* block = w + static_cast<size_t>(src) * row_bytes +
                         static_cast<size_t>(e0 / F::kBlockElems) * F::kBlockBytes;
  float v[8];
  F::dequant8(block, e0 % F::kBlockElems, v);
  OutT* o = out + r * n_cols + e0;
  if constexpr (sizeof(OutT) == 2) {
    uint32_t packed[4];
    for (int k = 0; k < 4; ++k) {
      const __half2 h = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
      packed[k] = *reinterpret_cast<const uint32_t*>(&h);
    }
    *reinterpret_cast<uint4*>(o) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  } else {
    reinterpret_cast<float4*>(o)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(o)[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

// F32 / F16 / BF16 sources, one element per thread (any n_cols).
template <int kFmt, class OutT>  // 0: F32, 1: F16, 2: BF16
__global__ void widen_kernel(const uint8_t* __restrict__ w, size_t row_bytes,
                             const int32_t* __restrict__ ids, int64_t row0, int n_cols, int64_t n,
                             OutT* __restrict__ out) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / n_cols;
  const int c = static_cast<int>(i % n_cols);
  const int64_t src = ids != nullptr ? ids[r] : row0 + r;
  const uint8_t* row = w + static_cast<size_t>(src) * row_bytes;
  float v;
  if constexpr (kFmt == 0) {
    v = reinterpret_cast<const float*>(row)[c];
  } else if constexpr (kFmt == 1) {
    v = half_bits_to_float(reinterpret_cast<const uint16_t*>(row)[c]);
  } else {
    v = bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[c]);
  }
  store<OutT>(out + i, v);
}

template <class F, class OutT>
void launch_quant(const DequantArgs& a, OutT* out) {
  const int64_t n_groups = a.n_rows * (a.n_cols / 8);
  if (n_groups == 0) return;
  const auto blocks = static_cast<unsigned>((n_groups + 255) / 256);
  const auto* w = static_cast<const uint8_t*>(a.w);
  const int n_cols = static_cast<int>(a.n_cols);
  if (n_groups + 256 < (int64_t{1} << 32)) {
    launch_kernel(dequant_kernel<F, OutT, uint32_t>, blocks, 256, 0, a.stream, w, a.row_bytes,
                  a.ids, a.row0, n_cols, n_groups, out);
  } else {
    launch_kernel(dequant_kernel<F, OutT, uint64_t>, blocks, 256, 0, a.stream, w, a.row_bytes,
                  a.ids, a.row0, n_cols, n_groups, out);
  }
}

template <int kFmt, class OutT>
void launch_widen(const DequantArgs& a, OutT* out) {
  const int64_t n = a.n_rows * a.n_cols;
  if (n == 0) return;
  launch_kernel(widen_kernel<kFmt, OutT>, static_cast<unsigned>((n + 255) / 256), 256, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.row_bytes, a.ids, a.row0,
                static_cast<int>(a.n_cols), n, out);
}

// GGUF type ids (gguf::GgmlType).
template <class OutT>
bool dequantize(uint32_t type_id, const DequantArgs& a, OutT* out) {
  switch (type_id) {
    case 0:
      launch_widen<0>(a, out);
      return true;  // F32
    case 1:
      launch_widen<1>(a, out);
      return true;  // F16
    case 30:
      launch_widen<2>(a, out);
      return true;  // BF16
    case 2:
      launch_quant<DqQ4_0>(a, out);
      return true;
    case 3:
      launch_quant<DqQ4_1>(a, out);
      return true;
    case 6:
      launch_quant<DqQ5<false>>(a, out);
      return true;
    case 7:
      launch_quant<DqQ5<true>>(a, out);
      return true;
    case 8:
      launch_quant<DqQ8_0>(a, out);
      return true;
    case 39:
      launch_quant<DqMXFP4>(a, out);
      return true;
    case 10:
      launch_quant<DqQ2_K>(a, out);
      return true;
    case 11:
      launch_quant<DqQ3_K>(a, out);
      return true;
    case 12:
      launch_quant<DqK4<false>>(a, out);
      return true;
    case 13:
      launch_quant<DqK4<true>>(a, out);
      return true;
    case 14:
      launch_quant<DqQ6_K>(a, out);
      return true;
    default:
      return false;
  }
}

__global__ void f32_to_f16_kernel(const float* __restrict__ x, int64_t n,
                                  __half* __restrict__ out) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(x[i]);
}

}  // namespace

bool launch_dequant(uint32_t type_id, const DequantArgs& a) {
  if (a.f16) return dequantize(type_id, a, static_cast<__half*>(a.out));
  return dequantize(type_id, a, static_cast<float*>(a.out));
}

void launch_f32_to_f16(const float* x, int64_t n, uint16_t* out, StreamHandle stream) {
  if (n == 0) return;
  launch_kernel(f32_to_f16_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, x, n,
                reinterpret_cast<__half*>(out));
}

}  // namespace hypura::compute::cuda
