// Internal: the block formats' dequantizers for the kernels that widen weights (dequant.cu,
// expert_gemm.cu). Each format: kBlockBytes, kBlockElems and dequant8(block, i0, out), the
// elements i0..i0+7 of a block (8 elements never straddle a sub-block, so a thread decodes
// its scales once). The formats the expert kernel runs most also split dequant8 in fetch
// (the loads, into a Raw) and decode (the arithmetic), so it can issue a step's loads and
// decode them a step later (Staged). Products and sums use __fmul_rn / __fsub_rn / __fadd_rn so
// nvcc does not contract them into FMAs: the CPU rounds each, and the F32 values equal its own.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "compute/cuda/common.cuh"

namespace hypura::compute::cuda::formats {

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
  struct Raw {
    Words8 quants;
    uint32_t d;
  };
  static __device__ Raw fetch(const uint8_t* b, int i0) {
    return {fetch_8_a1(b + 2 + i0), load_u16(b)};
  }
  static __device__ void decode(const Raw& r, int, float (&v)[8]) {
    const float d = half_bits_to_float(static_cast<uint16_t>(r.d));
    int words[2];
    join_8(r.quants, words);
    for (int k = 0; k < 8; ++k) {
      const auto q = static_cast<int8_t>(static_cast<uint32_t>(words[k / 4]) >> (8 * (k % 4)));
      v[k] = __fmul_rn(static_cast<float>(q), d);
    }
  }
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    decode(fetch(b, i0), i0, v);
  }
};
// Elements i0..i0+7 are the low (i0 < 16) or high nibbles of 8 consecutive code bytes:
// two words of four codes, each turned into its doubled E2M1 values by mxfp4_values4.
struct DqMXFP4 {
  static constexpr int kBlockBytes = 17, kBlockElems = kQK;
  struct Raw {
    Words8 codes;
    uint32_t scale;
  };
  static __device__ Raw fetch(const uint8_t* b, int i0) {
    return {fetch_8_a1(b + 1 + i0 % 16), b[0]};
  }
  static __device__ void decode(const Raw& r, int i0, float (&v)[8]) {
    const float d = e8m0_half_to_float(r.scale);
    int words[2];
    join_8(r.codes, words);
    const int shift = 4 * (i0 / 16);
    for (int w = 0; w < 2; ++w) {
      const int vals = mxfp4_values4((static_cast<uint32_t>(words[w]) >> shift) & 0x0F0F0F0Fu);
      for (int k = 0; k < 4; ++k) {
        v[4 * w + k] = __fmul_rn(static_cast<float>(static_cast<int8_t>(vals >> (8 * k))), d);
      }
    }
  }
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    decode(fetch(b, i0), i0, v);
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
// Q4_K (kFive = false) and Q5_K. Raw: d and dmin, the 12 packed scale bytes, the 8 quant
// bytes (and Q5_K's 8 high-bit bytes) as aligned words: blocks, their fields and i0 % 32 are
// multiples of 4 bytes.
template <bool kFive>
struct DqK4 {
  static constexpr int kBlockBytes = kFive ? 176 : 144, kBlockElems = kQK_K;
  static constexpr int kQs = kFive ? 48 : 16;
  struct Raw {
    uint32_t dm, scales[3], lo[2], hi[2];
  };
  static __device__ Raw fetch(const uint8_t* b, int i0) {
    const int l0 = i0 % 32;
    const uint8_t* qs = b + kQs + (i0 / 64) * 32 + l0;
    Raw r = {load_u32_a4(b),
             {load_u32_a4(b + 4), load_u32_a4(b + 8), load_u32_a4(b + 12)},
             {load_u32_a4(qs), load_u32_a4(qs + 4)},
             {0, 0}};
    if constexpr (kFive) {
      r.hi[0] = load_u32_a4(b + 16 + l0);
      r.hi[1] = load_u32_a4(b + 20 + l0);
    }
    return r;
  }
  static __device__ void decode(const Raw& r, int i0, float (&v)[8]) {
    // Sub-block j's 6-bit scale and min: bytes j and j + 4 of the packed 12 (j < 4), or the
    // nibbles of byte j + 4 and the top bits of bytes j - 4 and j. Byte j % 4 of each word.
    const int j = i0 / 32, sh = 8 * (j % 4);
    const uint32_t b0 = (r.scales[0] >> sh) & 0xFF, b1 = (r.scales[1] >> sh) & 0xFF,
                   b2 = (r.scales[2] >> sh) & 0xFF;
    const bool low = j < 4;
    const int sc = static_cast<int>(low ? b0 & 63 : (b2 & 0xF) | ((b0 >> 6) << 4));
    const int mn = static_cast<int>(low ? b1 & 63 : (b2 >> 4) | ((b1 >> 6) << 4));
    const float dl =
        __fmul_rn(half_bits_to_float(static_cast<uint16_t>(r.dm)), static_cast<float>(sc));
    const float ml =
        __fmul_rn(half_bits_to_float(static_cast<uint16_t>(r.dm >> 16)), static_cast<float>(mn));
    for (int k = 0; k < 8; ++k) {
      const int bit = 8 * (k % 4);
      int val = static_cast<int>((r.lo[k / 4] >> (bit + 4 * (j % 2))) & 0xF);
      if constexpr (kFive) val |= static_cast<int>(((r.hi[k / 4] >> (bit + j)) & 1) << 4);
      v[k] = mul_sub(dl, val, ml);
    }
  }
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    decode(fetch(b, i0), i0, v);
  }
};
// Raw: the 8 low-nibble and 8 high-bit bytes (2-byte aligned) as words, the scale and d.
struct DqQ6_K {
  static constexpr int kBlockBytes = 210, kBlockElems = kQK_K;
  struct Raw {
    Words8 low, high;
    uint32_t scale, d;
  };
  static __device__ Raw fetch(const uint8_t* b, int i0) {
    const int c = i0 / 128;
    return {fetch_8_a1(b + c * 64 + i0 % 64), fetch_8_a1(b + 128 + c * 32 + i0 % 32),
            b[192 + i0 / 16], load_u16(b + 208)};
  }
  static __device__ void decode(const Raw& r, int i0, float (&v)[8]) {
    const float dl = __fmul_rn(half_bits_to_float(static_cast<uint16_t>(r.d)),
                               static_cast<float>(static_cast<int8_t>(r.scale)));
    const int h = (i0 % 128) / 64, s = (i0 % 128) / 32;
    int low[2], high[2];
    join_8(r.low, low);
    join_8(r.high, high);
    for (int k = 0; k < 8; ++k) {
      const int bit = 8 * (k % 4);
      const int lo = (static_cast<uint32_t>(low[k / 4]) >> (bit + 4 * h)) & 0xF;
      const int hi = (static_cast<uint32_t>(high[k / 4]) >> (bit + 2 * s)) & 3;
      v[k] = __fmul_rn(dl, static_cast<float>((lo | (hi << 4)) - 32));
    }
  }
  static __device__ void dequant8(const uint8_t* b, int i0, float (&v)[8]) {
    decode(fetch(b, i0), i0, v);
  }
};

// F's loads and arithmetic apart: its own fetch and decode where it splits them, else the
// block's address and dequant8 (the loads then wait at decode).
template <class F, class = void>
struct Staged {
  using Raw = const uint8_t*;
  static __device__ Raw fetch(const uint8_t* b, int) { return b; }
  static __device__ void decode(Raw b, int i0, float (&v)[8]) { F::dequant8(b, i0, v); }
};
template <class F>
struct Staged<F, std::void_t<typename F::Raw>> {
  using Raw = typename F::Raw;
  static __device__ Raw fetch(const uint8_t* b, int i0) { return F::fetch(b, i0); }
  static __device__ void decode(const Raw& r, int i0, float (&v)[8]) { F::decode(r, i0, v); }
};

// fn(F{}) for the block format of GGUF type id type_id (gguf::GgmlType); false for a type
// that is not block-quantized.
template <class Fn>
__host__ bool visit_block_format(uint32_t type_id, Fn&& fn) {
  switch (type_id) {
    case 2:
      fn(DqQ4_0{});
      return true;
    case 3:
      fn(DqQ4_1{});
      return true;
    case 6:
      fn(DqQ5<false>{});
      return true;
    case 7:
      fn(DqQ5<true>{});
      return true;
    case 8:
      fn(DqQ8_0{});
      return true;
    case 39:
      fn(DqMXFP4{});
      return true;
    case 10:
      fn(DqQ2_K{});
      return true;
    case 11:
      fn(DqQ3_K{});
      return true;
    case 12:
      fn(DqK4<false>{});
      return true;
    case 13:
      fn(DqK4<true>{});
      return true;
    case 14:
      fn(DqQ6_K{});
      return true;
    default:
      return false;
  }
}

}  // namespace hypura::compute::cuda::formats
