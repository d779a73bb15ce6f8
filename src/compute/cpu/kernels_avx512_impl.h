// AVX-512 (BW/VL/DQ) kernels, optionally with VNNI. Included by kernels_avx512.cc and
// kernels_avx512vnni.cc, compiled with their own -m flags; __AVX512VNNI__ picks
// vpdpwssd / vpdpbusd over the maddubs + madd pair (same integer results).
//
// Layout of the K-quant kernels: a super-block's 256 weights are unpacked into four
// 64-byte vectors W_k holding elements 64k..64k+63 as unsigned integers, so they meet
// the activation bytes with plain loads. maddubs(W, y) forms int16 pair sums, a madd
// (or vpdpwssd) with the sub-block scales as int16 lanes finishes the integer sum;
// offsets and minimums are applied through the Q8_K per-16 sums. Integer parts are
// exact; floats enter once per super-block (one cvt + one FMA per token).
//
// Every function lives in an anonymous namespace (see tile_common.h).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "compute/cpu/kernels.h"
#include "compute/cpu/simd_common.h"
#include "compute/cpu/tile_common.h"
#include "quant/blocks.h"

namespace hypura::compute {
namespace {

using quant::BlockMXFP4;
using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::BlockQ8_K;

// acc + sum over byte pairs of (u8 w * s8 y), each pair sum times the int16 lane of s.
inline __m512i dot_scaled(__m512i acc, __m512i w, __m512i y, __m512i s) {
  const __m512i p = _mm512_maddubs_epi16(w, y);
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(acc, p, s);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(p, s));
#endif
}

// The same with acc = 0 (one instruction fewer than zeroing an accumulator first).
inline __m512i dot_scaled_first(__m512i w, __m512i y, __m512i s) {
  return _mm512_madd_epi16(_mm512_maddubs_epi16(w, y), s);
}

inline float hsum512(__m512 v) {
  return hsum256(_mm256_add_ps(_mm512_castps512_ps256(v),
                               _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

inline __m512i load512(const void* p) {
  return _mm512_loadu_si512(p);
}
// Word-index vector whose 16-bit lanes select, per 128-bit lane j, word v[j] (vpermw).
inline __m512i lane_words(int v0, int v1, int v2, int v3) {
  auto w = [](int v) { return static_cast<int>(static_cast<unsigned>(v) * 0x10001u); };
  return _mm512_set_epi32(w(v3), w(v3), w(v3), w(v3), w(v2), w(v2), w(v2), w(v2), w(v1), w(v1),
                          w(v1), w(v1), w(v0), w(v0), w(v0), w(v0));
}

// Byte vector: b_lo in the low 32 bytes, b_hi in the high 32 bytes.
inline __m512i halves8(int b_lo, int b_hi) {
  return _mm512_mask_blend_epi8(0xFFFFFFFF00000000ull, _mm512_set1_epi8(static_cast<char>(b_lo)),
                                _mm512_set1_epi8(static_cast<char>(b_hi)));
}

// Elements 64k..64k+63 of a 2-bit plane (Q2_K / Q3_K low bits) as bytes 0..3.
inline void unpack_2bit(const uint8_t* qs, __m512i* W) {
  const __m512i q = load512(qs);
  const __m512i m3 = _mm512_set1_epi8(3);
  const __m512i s0 = _mm512_and_si512(q, m3);
  const __m512i s1 = _mm512_and_si512(_mm512_srli_epi16(q, 2), m3);
  const __m512i s2 = _mm512_and_si512(_mm512_srli_epi16(q, 4), m3);
  const __m512i s3 = _mm512_and_si512(_mm512_srli_epi16(q, 6), m3);
  W[0] = _mm512_shuffle_i64x2(s0, s1, 0x44);
  W[1] = _mm512_shuffle_i64x2(s2, s3, 0x44);
  W[2] = _mm512_shuffle_i64x2(s0, s1, 0xEE);
  W[3] = _mm512_shuffle_i64x2(s2, s3, 0xEE);
}

// ---- K-quants ----

// Q4_K / Q5_K read their activations in "nibble order": the eight 32-element sub-blocks
// of each Q8_K block stored as 0, 2, 1, 3, 4, 6, 5, 7 (bsums moved with them). A 64-byte
// load of the weights' low nibbles is then sub-blocks (0 | 2), the high nibbles (1 | 3),
// which meet the activations without a lane shuffle. The reorder is part of this table's
// activation quantizer (quantize_q8_k_nibble_order), done once per token row.
constexpr int kNibbleOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};

// ---- activation quantizers: bit-identical to quant::quantize_row_q8_k / _q8_0 ----
// (same float products, round-half-even conversions, first-of-ties signed maximum).

// One 256-value block to Q8_K; sub-block s (32 values) is written at position order[s].
inline void quantize_block_q8_k(const float* x, BlockQ8_K* y, const int* order) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 v[16];
  __m512 vmax = _mm512_setzero_ps();
  for (int j = 0; j < 16; ++j) {
    v[j] = _mm512_loadu_ps(x + 16 * j);
    vmax = _mm512_max_ps(vmax, _mm512_and_ps(v[j], abs_mask));
  }
  const float amax = _mm512_reduce_max_ps(vmax);
  if (amax == 0.0f) {
    std::memset(y, 0, sizeof(*y));
    return;
  }
  float max = 0.0f;  // the signed value of the first element with |x| == amax
  for (int j = 0; j < 16; ++j) {
    const __mmask16 hit =
        _mm512_cmp_ps_mask(_mm512_and_ps(v[j], abs_mask), _mm512_set1_ps(amax), _CMP_EQ_OQ);
    if (hit) {
      max = x[16 * j + __builtin_ctz(hit)];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m512 is = _mm512_set1_ps(iscale);
  for (int j = 0; j < 16; ++j) {
    const __m512i q =
        _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v[j], is)), _mm512_set1_epi32(127));
    const int pos = 2 * order[j / 2] + j % 2;  // destination 16-value chunk
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y->qs + 16 * pos), _mm512_cvtsepi32_epi8(q));
    y->bsums[pos] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
  }
  y->d = 1.0f / iscale;
}

constexpr int kNaturalOrder[8] = {0, 1, 2, 3, 4, 5, 6, 7};

void quantize_q8_k_avx512(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(vy);
  for (int64_t b = 0; b < n / quant::kQK_K; ++b) {
    quantize_block_q8_k(x + b * quant::kQK_K, y + b, kNaturalOrder);
  }
}

void quantize_q8_k_nibble_order(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(vy);
  for (int64_t b = 0; b < n / quant::kQK_K; ++b) {
    quantize_block_q8_k(x + b * quant::kQK_K, y + b, kNibbleOrder);
  }
}

// Bytes 0..7 of v reordered as 0, 2, 1, 3, 4, 6, 5, 7.
inline uint64_t nibble_order_bytes(uint64_t v) {
  return (v & 0xFF0000FFFF0000FFull) | ((v & 0x0000FF000000FF00ull) << 8) |
         ((v & 0x00FF000000FF0000ull) >> 8);
}

// A Q4_K / Q5_K block's 256 quants as four 64-byte vectors W[k] of sub-blocks (0|2),
// (1|3), (4|6), (5|7): the low and high nibbles of each 64-byte half of qs, plus Q5_K's
// fifth bit. They meet activations in nibble order with plain loads.
template <bool kFive, class Block>
inline void unpack_qk4(const Block& b, __m512i* W) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int h = 0; h < 2; ++h) {
    const __m512i q = load512(b.qs + 64 * h);
    W[2 * h] = _mm512_and_si512(q, m4);
    W[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
  }
  if constexpr (kFive) {
    const __m512i qh = _mm512_broadcast_i64x4(load256(b.qh));
    const __m512i hbit[4] = {halves8(1, 4), halves8(2, 8), halves8(16, 64), halves8(32, 128)};
    for (int k = 0; k < 4; ++k) {
      W[k] = _mm512_or_si512(
          W[k], _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(qh, hbit[k]), _mm512_set1_epi8(0x10)));
    }
  }
}

// A Q6_K block's 256 quants (0..63, offset 32 not removed) as four 64-byte vectors of
// elements 64k .. 64k + 63 in natural order; sub-block 4k + L is 128-bit lane L of W[k].
inline void unpack_q6k(const BlockQ6_K& b, __m512i* W) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
  const __m512i sh01 =
      _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
  const __m512i sh23 =
      _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(6));
  for (int c = 0; c < 2; ++c) {
    const __m512i l = load512(b.ql + 64 * c);
    const __m512i h = _mm512_broadcast_i64x4(load256(b.qh + 32 * c));
    const __m512i h01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(h, sh01), m2), 4);
    const __m512i h23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(h, sh23), m2), 4);
    W[2 * c] = _mm512_or_si512(_mm512_and_si512(l, m4), h01);
    W[2 * c + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), h23);
  }
}

// The scale word indices of unpack_qk4's chunks k (vpermw over the 8 scales as words):
// sub-blocks (0|2), (1|3), (4|6), (5|7).
inline void qk4_scale_index(__m512i* idx) {
  idx[0] = lane_words(0, 0, 2, 2);
  idx[1] = lane_words(1, 1, 3, 3);
  idx[2] = lane_words(4, 4, 6, 6);
  idx[3] = lane_words(5, 5, 7, 7);
}

// The same for chunks of 64 elements in natural order over 16-element sub-blocks (Q2_K,
// Q3_K, Q6_K): sub-block 4k + L in 128-bit lane L of chunk k.
inline void k16_scale_index(__m512i* idx) {
  for (int k = 0; k < 4; ++k) idx[k] = lane_words(4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3);
}

template <bool kFive>
struct QK4 {  // Q4_K (kFive = false) and Q5_K (kFive = true)
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    const auto* w = reinterpret_cast<const Block*>(wr);
    const BlockQ8_K* y[T];
    act_rows<BlockQ8_K, T>(x, xs, y);
    __m512 acc[T];
    __m256 accm[T];
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_setzero_ps();
      accm[t] = _mm256_setzero_ps();
    }
    __m512i idx[4];
    qk4_scale_index(idx);
    for (int64_t i = 0; i < n / quant::kQK_K; ++i) {
      if (prefetch) prefetch_ahead(w + i, sizeof(*w));
      uint64_t sc8, m8;
      unpack_k4(w[i].scales, &sc8, &m8);
      // vpermw only reads words 0..7, so the upper lanes of the source may be anything.
      const __m512i scw =
          _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc8))));
      const __m128i mb = _mm_cvtsi64_si128(static_cast<long long>(nibble_order_bytes(m8)));
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));  // m pairs
      __m512i W[4], S[4];
      unpack_qk4<kFive>(w[i], W);
      for (int k = 0; k < 4; ++k) S[k] = _mm512_permutexvar_epi16(idx[k], scw);
      uint32_t dd;
      std::memcpy(&dd, &w[i].d, 4);  // d and dmin are adjacent halves
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd)));
      const float dw = _mm_cvtss_f32(dm), dmin = _mm_cvtss_f32(_mm_movehdup_ps(dm));
      const __m512 dwv = _mm512_set1_ps(dw);
      const __m256 dminv = _mm256_set1_ps(dmin);
      for (int t = 0; t < T; ++t) {
        const int8_t* yq = y[t][i].qs;
        __m512i isum = dot_scaled_first(W[0], load512(yq), S[0]);
        for (int k = 1; k < 4; ++k) isum = dot_scaled(isum, W[k], load512(yq + 64 * k), S[k]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                 _mm512_mul_ps(dwv, _mm512_set1_ps(y[t][i].d)), acc[t]);
        const __m256i msum = _mm256_madd_epi16(load256(y[t][i].bsums), mins);
        accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum),
                                  _mm256_mul_ps(dminv, _mm256_set1_ps(y[t][i].d)), accm[t]);
      }
    }
    for (int t = 0; t < T; ++t) out[t] = hsum512(acc[t]) - hsum256(accm[t]);
  }
};

// Q6_K and Q3_K: signed quants stored with an offset (32, 4) that is removed through
// the activation sums: sum sc * (u - off) * y = sum sc * u * y - off * sum sc * bsum.
struct Q6K {
  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    const auto* w = reinterpret_cast<const BlockQ6_K*>(wr);
    const BlockQ8_K* y[T];
    act_rows<BlockQ8_K, T>(x, xs, y);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    __m512i idx[4];
    k16_scale_index(idx);
    for (int64_t i = 0; i < n / quant::kQK_K; ++i) {
      if (prefetch) prefetch_ahead(w + i, sizeof(*w));
      const __m256i sc16 = _mm256_cvtepi8_epi16(load128(w[i].scales));
      const __m512i scw = _mm512_broadcast_i64x4(sc16);
      __m512i W[4], S[4];
      unpack_q6k(w[i], W);
      for (int k = 0; k < 4; ++k) S[k] = _mm512_permutexvar_epi16(idx[k], scw);
      const __m512 dwv = _mm512_set1_ps(h2f(w[i].d));
      for (int t = 0; t < T; ++t) {
        const int8_t* yq = y[t][i].qs;
        __m512i isum = dot_scaled_first(W[0], load512(yq), S[0]);
        for (int k = 1; k < 4; ++k) isum = dot_scaled(isum, W[k], load512(yq + 64 * k), S[k]);
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load256(y[t][i].bsums), sc16), 5);
        isum = _mm512_sub_epi32(isum, _mm512_inserti64x4(_mm512_setzero_si512(), corr, 0));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                 _mm512_mul_ps(dwv, _mm512_set1_ps(y[t][i].d)), acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) out[t] = hsum512(acc[t]);
  }
};

struct Q3K {
  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    const auto* w = reinterpret_cast<const BlockQ3_K*>(wr);
    const BlockQ8_K* y[T];
    act_rows<BlockQ8_K, T>(x, xs, y);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i bit3 = _mm512_set1_epi8(4);
    __m512i idx[4];
    k16_scale_index(idx);
    const __m512i hbit[4] = {halves8(1, 2), halves8(4, 8), halves8(16, 32), halves8(64, 128)};
    for (int64_t i = 0; i < n / quant::kQK_K; ++i) {
      if (prefetch) prefetch_ahead(w + i, sizeof(*w));
      const __m256i sc16 = _mm256_cvtepi8_epi16(unpack_q3k_scales(w[i].scales));
      const __m512i scw = _mm512_broadcast_i64x4(sc16);
      const __m512i hm = _mm512_broadcast_i64x4(load256(w[i].hmask));
      __m512i W[4], S[4];
      unpack_2bit(w[i].qs, W);
      for (int k = 0; k < 4; ++k) {
        W[k] =
            _mm512_or_si512(W[k], _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(hm, hbit[k]), bit3));
        S[k] = _mm512_permutexvar_epi16(idx[k], scw);
      }
      const __m512 dwv = _mm512_set1_ps(h2f(w[i].d));
      for (int t = 0; t < T; ++t) {
        const int8_t* yq = y[t][i].qs;
        __m512i isum = dot_scaled_first(W[0], load512(yq), S[0]);
        for (int k = 1; k < 4; ++k) isum = dot_scaled(isum, W[k], load512(yq + 64 * k), S[k]);
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load256(y[t][i].bsums), sc16), 2);
        isum = _mm512_sub_epi32(isum, _mm512_inserti64x4(_mm512_setzero_si512(), corr, 0));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                 _mm512_mul_ps(dwv, _mm512_set1_ps(y[t][i].d)), acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) out[t] = hsum512(acc[t]);
  }
};

struct Q2K {
  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    const auto* w = reinterpret_cast<const BlockQ2_K*>(wr);
    const BlockQ8_K* y[T];
    act_rows<BlockQ8_K, T>(x, xs, y);
    __m512 acc[T];
    __m256 accm[T];
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_setzero_ps();
      accm[t] = _mm256_setzero_ps();
    }
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m512i idx[4];
    k16_scale_index(idx);
    for (int64_t i = 0; i < n / quant::kQK_K; ++i) {
      if (prefetch) prefetch_ahead(w + i, sizeof(*w));
      const __m128i s = load128(w[i].scales);
      const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s, m4));
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4));
      const __m512i scw = _mm512_broadcast_i64x4(sc16);
      __m512i W[4], S[4];
      unpack_2bit(w[i].qs, W);
      for (int k = 0; k < 4; ++k) S[k] = _mm512_permutexvar_epi16(idx[k], scw);
      const __m512 dwv = _mm512_set1_ps(h2f(w[i].d));
      const __m256 dminv = _mm256_set1_ps(h2f(w[i].dmin));
      for (int t = 0; t < T; ++t) {
        const int8_t* yq = y[t][i].qs;
        __m512i isum = dot_scaled_first(W[0], load512(yq), S[0]);
        for (int k = 1; k < 4; ++k) isum = dot_scaled(isum, W[k], load512(yq + 64 * k), S[k]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                 _mm512_mul_ps(dwv, _mm512_set1_ps(y[t][i].d)), acc[t]);
        const __m256i msum = _mm256_madd_epi16(load256(y[t][i].bsums), mins);
        accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum),
                                  _mm256_mul_ps(dminv, _mm256_set1_ps(y[t][i].d)), accm[t]);
      }
    }
    for (int t = 0; t < T; ++t) out[t] = hsum512(acc[t]) - hsum256(accm[t]);
  }
};

// ---- 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4): transposed groups of 16 blocks
// ----
//
// A row's blocks go in groups of kLanes = 16 (the last group holds the rest, m < 16), and
// int32 lane L of every vector belongs to block L of its group: vector k holds bytes
// 4k..4k+3 (elements 4k..4k+3) of each block. Eight dpbusd then leave each block's exact
// integer dot product in its own lane, and one float update per token scales 16 blocks.
// The weights are transposed to that layout in registers (per group, shared by the tile's
// tokens); the activations are quantized straight into it (quantize_grouped below):
//   group of m blocks = d[m] (fp16) [, s[m] (fp16, Q8_1)], then 8 rows of m dwords,
// the same bytes as m standard blocks, as the KernelTable contract requires. A partial
// group's missing lanes are zero on both sides, so they add exactly nothing.
constexpr int kLanes = 16;

// Lanes of the group starting at block b0 of a row of nb blocks.
inline int group_size(int64_t nb, int64_t b0) {
  return static_cast<int>(nb - b0 < kLanes ? nb - b0 : kLanes);
}

inline __mmask16 lane_mask(int m) {
  return static_cast<__mmask16>((1u << m) - 1);
}

// Lane r of the result: op over the 16 lanes of v[r]; op is max, or add on integers (both
// exact, so the folding order does not change the result).
template <class Op>
inline __m512 fold16(const __m512* v, Op op) {
  __m512 x[8], y[4], z[2];
  for (int i = 0; i < 8; ++i) {  // 128-bit lanes 0-1: v[2i] folded to 8, lanes 2-3: v[2i + 1]
    x[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
              _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  }
  for (int i = 0; i < 4; ++i) {  // 128-bit lane L: v[4i + L] folded to 4
    y[i] = op(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x88),
              _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xDD));
  }
  for (int i = 0; i < 2; ++i) {  // lane L: v[8i + L], then v[8i + 4 + L], folded to 2 each
    const __m512d a = _mm512_castps_pd(y[2 * i]), b = _mm512_castps_pd(y[2 * i + 1]);
    z[i] =
        op(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Lane 4L + e holds v[4e + L].
  const __m512 f = op(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_ps(order, f);
}

// Q8_0 (kSums = false) or Q8_1 (kSums = true) activations in transposed groups, as the
// reference quantizer rounds them (id = 127 / amax, round half to even; d = amax / 127 and
// s = d * sum(q) in fp16), a group's 16 blocks at once: their maximums and sums fold into
// one vector each (lane = block), so the divisions and fp16 conversions run 16 wide.
template <bool kSums>
void quantize_grouped(const float* x, void* vy, int64_t n) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const auto max = [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); };
  const auto add = [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); };
  auto* out = static_cast<uint8_t*>(vy);
  const int64_t nb = n / quant::kQK;
  for (int64_t b0 = 0; b0 < nb; b0 += kLanes) {
    const int m = group_size(nb, b0);
    const float* xg = x + b0 * quant::kQK;
    const __mmask16 mask = lane_mask(m);
    __m512 part[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      part[l] = l < m ? _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(xg + 32 * l), abs_mask),
                                      _mm512_and_ps(_mm512_loadu_ps(xg + 32 * l + 16), abs_mask))
                      : _mm512_setzero_ps();
    }
    const __m512 amax = fold16(part, max);
    const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
    alignas(64) float id[kLanes];
    _mm512_store_ps(id,
                    _mm512_maskz_div_ps(_mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_UQ),
                                        _mm512_set1_ps(127.0f), amax));
    uint8_t* rows = out + (kSums ? 4 : 2) * m;
    for (int l = 0; l < m; ++l) {
      const __m512 scale = _mm512_set1_ps(id[l]);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + 32 * l), scale));
      const __m512i q1 =
          _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + 32 * l + 16), scale));
      alignas(32) int8_t q[quant::kQK];
      _mm_store_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(q0));
      _mm_store_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(q1));
      for (int k = 0; k < 8; ++k) std::memcpy(rows + 4 * (k * m + l), q + 4 * k, 4);
      if constexpr (kSums) part[l] = _mm512_cvtepi32_ps(_mm512_add_epi32(q0, q1));
    }
    _mm256_mask_storeu_epi16(out, mask, _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
    if constexpr (kSums) {
      for (int l = m; l < kLanes; ++l) part[l] = _mm512_setzero_ps();
      const __m512 s = _mm512_mul_ps(d, fold16(part, add));
      _mm256_mask_storeu_epi16(out + 2 * m, mask, _mm512_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT));
    }
    out = rows + quant::kQK * m;
  }
}

// One group's activations for a token: row k (8 of them) and the fp16 fields.
struct ActGroup {
  const uint8_t* base;  // the group's first byte
  int m;
  bool full() const { return m == kLanes; }
  __m512i row(int k, int fields) const {
    const uint8_t* p = base + 2 * fields * m + 4 * k * m;
    return full() ? load512(p) : _mm512_maskz_loadu_epi32(lane_mask(m), p);
  }
  __m512 halves(int field) const {  // field 0: d, 1: s
    const uint8_t* p = base + 2 * field * m;
    return _mm512_cvtph_ps(full() ? load256(p) : _mm256_maskz_loadu_epi16(lane_mask(m), p));
  }
  // Lanes 0..m-1 of one of the token's int32 per-block terms.
  __m512i terms(const int32_t* p) const { return _mm512_maskz_loadu_epi32(lane_mask(m), p); }
};

// A token's group of 8 blocks (a row of 256 columns) in both halves of each vector, against
// two such rows side by side in the lanes (Legacy32's paired rows).
struct ActPair {
  static constexpr int kBlocks = 8;
  const uint8_t* base;
  __m512i row(int k, int fields) const {
    return _mm512_broadcast_i64x4(load256(base + 2 * fields * kBlocks + 4 * k * kBlocks));
  }
  __m512 halves(int field) const {
    return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(load128(base + 2 * field * kBlocks)));
  }
  __m512i terms(const int32_t* p) const { return _mm512_broadcast_i64x4(load256(p)); }
};

// 4x4 dword transposes inside each 128-bit lane: z[g] lane i = 16 bytes of block g + 4i;
// out v[c] dword lane 4i + g = dword c of block 4i + g.
[[gnu::always_inline]] inline void transpose_lanes(const __m512i* z, __m512i* v) {
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  v[0] = _mm512_unpacklo_epi64(t0, t2);
  v[1] = _mm512_unpackhi_epi64(t0, t2);
  v[2] = _mm512_unpacklo_epi64(t1, t3);
  v[3] = _mm512_unpackhi_epi64(t1, t3);
}

// Bytes [off, off + 16) of each of the group's m blocks (stride `bs`), transposed: v[c]
// lane L = dword c of those bytes of block L (zero for L >= m).
[[gnu::always_inline]] inline void load_transposed16(const uint8_t* b, size_t bs, int m, int off,
                                                     __m512i* v) {
  __m512i z[4];
  for (int g = 0; g < 4; ++g) {
    __m512i r = _mm512_setzero_si512();
    if (g < m) r = _mm512_castsi128_si512(load128(b + g * bs + off));
    if (g + 4 < m) r = _mm512_inserti32x4(r, load128(b + (g + 4) * bs + off), 1);
    if (g + 8 < m) r = _mm512_inserti32x4(r, load128(b + (g + 8) * bs + off), 2);
    if (g + 12 < m) r = _mm512_inserti32x4(r, load128(b + (g + 12) * bs + off), 3);
    z[g] = r;
  }
  transpose_lanes(z, v);
}

// The dword at byte `off` of each block of the group (zero lanes past m).
[[gnu::always_inline]] inline __m512i gather_fields(const uint8_t* b, size_t bs, int m, int off) {
  // Scalar loads inserted into lanes: vpgatherdd is slow on CPUs with the gather data
  // sampling mitigation (on the Xeon VM, one-token Q8_0 products ran a fifth faster without
  // it), and stores to a stack array then one wide load stall on store forwarding (Q4_1's
  // one-token products took twice as long on Zen 4).
  auto dword = [&](int l) {
    int v = 0;
    if (l < m) std::memcpy(&v, b + l * bs + off, 4);
    return v;
  };
  __m128i q[4];
  for (int g = 0; g < 4; ++g)
    q[g] = _mm_setr_epi32(dword(4 * g), dword(4 * g + 1), dword(4 * g + 2), dword(4 * g + 3));
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(q[1], q[0])),
                            _mm256_set_m128i(q[3], q[2]), 1);
}

// The low (hi = false) or high halves of 16 dwords as floats (fp16 fields).
inline __m512 halves_of(__m512i dwords, bool hi) {
  if (hi) dwords = _mm512_srli_epi32(dwords, 16);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dwords));
}

// Nibble formats: W[k] for k < 4 are the low nibbles of qs dword k, W[k + 4] the high ones.
[[gnu::always_inline]] inline void nibbles_transposed(const uint8_t* b, size_t bs, int m,
                                                      int qs_off, __m512i* W) {
  __m512i v[4];
  load_transposed16(b, bs, m, qs_off, v);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    W[c] = _mm512_and_si512(v[c], m4);
    W[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v[c], 4), m4);
  }
}

// Adds 16 to the bytes whose element has its qh bit set (Q5_0 / Q5_1): byte p of W[k]'s
// lane is element 4k + p, whose bit sits in qh byte k / 2 at bit 4 (k % 2) + p; lane L of
// `qh` holds block L's qh dword.
[[gnu::always_inline]] inline void add_fifth_bit(__m512i qh, __m512i* W) {
  const __m512i sixteen = _mm512_set1_epi8(16);
  for (int k = 0; k < 8; ++k) {
    // Every byte of dword j of each 128-bit lane takes qh byte k / 2 of that dword.
    const int s = (k / 2) * 0x01010101;
    const __m512i spread = _mm512_shuffle_epi8(
        qh,
        _mm512_broadcast_i32x4(_mm_setr_epi32(s, s + 0x04040404, s + 0x08080808, s + 0x0C0C0C0C)));
    const int sh = 4 * (k % 2);
    const __m512i bit = _mm512_set1_epi32(static_cast<int>(0x08040201u << sh));
    W[k] = _mm512_mask_add_epi8(W[k], _mm512_test_epi8_mask(spread, bit), W[k], sixteen);
  }
}

// The five-bit formats' headers (the scale fields, then qh) from one transposed load of
// each block's first 16 bytes: half the loads and lane inserts of gathering the two
// apart, which bound the one-token Q5_0 product. Returns the dword at byte 0 (the
// fields); *qh = the qh dword at byte qh_off (2 or 4).
[[gnu::always_inline]] inline __m512i fields_and_qh(const uint8_t* b, size_t bs, int m, int qh_off,
                                                    __m512i* qh) {
  __m512i v[4];
  load_transposed16(b, bs, m, 0, v);
  *qh = qh_off == 4 ? v[1]
                    : _mm512_or_si512(_mm512_srli_epi32(v[0], 8 * qh_off),
                                      _mm512_slli_epi32(v[1], 32 - 8 * qh_off));
  return v[0];
}

// Each format's weights of one group: unsigned_weights() gives W[k] = elements 4k..4k+3 of
// each block plus kOffset as unsigned bytes, lane L from the block at b + L * stride
// (Legacy32: a row's consecutive blocks; Rows32: one block of each of 16 rows), and
// returns lane L = the dword at byte 0 of that block: the scale (and minimum) fields,
// which every format keeps at byte 0 (and 2). Q8_0's weights() gives its signed bytes.
struct WQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 128;
  static void weights(const uint8_t* b, int m, __m512i* W) {
    load_transposed16(b, sizeof(Block), m, offsetof(Block, qs), W);
    load_transposed16(b, sizeof(Block), m, offsetof(Block, qs) + 16, W + 4);
  }
  [[gnu::always_inline]] static __m512i unsigned_weights(const uint8_t* b, size_t stride, int m,
                                                         __m512i* W) {
    load_transposed16(b, stride, m, offsetof(Block, qs), W);
    load_transposed16(b, stride, m, offsetof(Block, qs) + 16, W + 4);
    for (int k = 0; k < 8; ++k) W[k] = _mm512_xor_si512(W[k], _mm512_set1_epi8(-128));
    return gather_fields(b, stride, m, 0);
  }
};
struct WQ4_0 {
  using Block = BlockQ4_0;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 8;
  [[gnu::always_inline]] static __m512i unsigned_weights(const uint8_t* b, size_t stride, int m,
                                                         __m512i* W) {
    nibbles_transposed(b, stride, m, offsetof(Block, qs), W);
    return gather_fields(b, stride, m, 0);
  }
};
struct WQ5_0 {
  using Block = BlockQ5_0;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 16;
  [[gnu::always_inline]] static __m512i unsigned_weights(const uint8_t* b, size_t stride, int m,
                                                         __m512i* W) {
    nibbles_transposed(b, stride, m, offsetof(Block, qs), W);
    __m512i qh;
    const __m512i fields = fields_and_qh(b, stride, m, offsetof(Block, qh), &qh);
    add_fifth_bit(qh, W);
    return fields;
  }
};
// MXFP4: nibble codes looked up in the doubled E2M1 values plus 12 (one table per 128-bit
// lane; written out here rather than read from quant::kMxfp4Values: see
// check_isa_symbols.cmake).
struct WMXFP4 {
  using Block = BlockMXFP4;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 12;
  [[gnu::always_inline]] static __m512i unsigned_weights(const uint8_t* b, size_t stride, int m,
                                                         __m512i* W) {
    nibbles_transposed(b, stride, m, offsetof(Block, qs), W);
    const __m512i values = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    for (int k = 0; k < 8; ++k) W[k] = _mm512_shuffle_epi8(values, W[k]);
    return gather_fields(b, stride, m, 0);
  }
};
struct WQ4_1 {
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  [[gnu::always_inline]] static __m512i unsigned_weights(const uint8_t* b, size_t stride, int m,
                                                         __m512i* W) {
    nibbles_transposed(b, stride, m, offsetof(Block, qs), W);
    return gather_fields(b, stride, m, 0);
  }
};
struct WQ5_1 {
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  [[gnu::always_inline]] static __m512i unsigned_weights(const uint8_t* b, size_t stride, int m,
                                                         __m512i* W) {
    nibbles_transposed(b, stride, m, offsetof(Block, qs), W);
    __m512i qh;
    const __m512i fields = fields_and_qh(b, stride, m, offsetof(Block, qh), &qh);
    add_fifth_bit(qh, W);
    return fields;
  }
};

// The group's weight scales from the dwords at byte 0 of its blocks: the low fp16 half, or
// MXFP4's E8M0 byte as 2^(e - 128) (quant::e8m0_half_to_f32: subnormal below e = 2).
template <class Block>
inline __m512 weight_scales(__m512i fields) {
  if constexpr (std::is_same_v<Block, BlockMXFP4>) {
    const __m512i e = _mm512_and_si512(fields, _mm512_set1_epi32(0xFF));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 is_normal = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_normal, tiny, normal));
  } else {
    return halves_of(fields, false);
  }
}

// acc + sums of 4 consecutive (u8 w * s8 y) products per int32 lane.
inline __m512i dot_u8s8_acc(__m512i acc, __m512i w, __m512i y) {
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(acc, w, y);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, y), _mm512_set1_epi16(1)));
#endif
}

// sums[t * nb + b] = -offset * the sum of token t's quants in block b, for activations in
// transposed groups with `fields` fp16 fields ahead of their rows (a group's row k holds
// dword k of each block: eight dot products with ones leave each block's sum in its lane).
// Negated so that a dot starts from them.
template <int kFields>
void offset_sums(int64_t nb, const uint8_t* x, size_t xs, int nt, int offset, int32_t* sums) {
  const __m512i ones = _mm512_set1_epi8(1);
  constexpr size_t kActBlock = kFields == 2 ? sizeof(BlockQ8_1) : sizeof(BlockQ8_0);
  for (int t = 0; t < nt; ++t) {
    for (int64_t b0 = 0; b0 < nb; b0 += kLanes) {
      const ActGroup y{x + t * xs + b0 * kActBlock, group_size(nb, b0)};
      __m512i sum = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) sum = dot_u8s8_acc(sum, ones, y.row(k, kFields));
      sum = _mm512_mullo_epi32(sum, _mm512_set1_epi32(-offset));
      _mm512_mask_storeu_epi32(sums + t * nb + b0, lane_mask(y.m), sum);
    }
  }
}

// Every 32-element format: per group, T tokens' exact block sums (lane L = block L), then
// acc += sums * (d_w * d_y) per lane; formats with a minimum add m_w * s_y per lane.
template <class WF>
struct Legacy32 {
  using Block = typename WF::Block;
  static constexpr bool kMin = !WF::kSigned;
  // The signed nibble formats as unsigned weights (values + kOffset) less the exact
  // kOffset * sum(y) per block: two dot products a row instead of the abs/sign steps, and
  // the same integer sums (u <= 31: maddubs's int16 steps cannot saturate). Q8_0 keeps the
  // abs/sign steps, measured faster than its xor and second product.
  static constexpr bool kOffsetDot = WF::kSigned && WF::kOffset <= 64;
  static constexpr int kFields = kMin ? 2 : 1;  // fp16 fields ahead of an activation group's rows
  static constexpr size_t kActBlock = kMin ? sizeof(BlockQ8_1) : sizeof(BlockQ8_0);

  // Offset terms of a tile's tokens taken once for all its rows (they cost eight dot
  // products and a multiply per group and token) where a row's blocks fit in kMaxSumBlocks.
  static constexpr int kMaxTok = 8;
  static constexpr int64_t kMaxSumBlocks = 1024;

  // isum[t] lane L = the exact integer dot product of the group's block L with token t's;
  // `sums` (kOffsetDot formats; null: computed here) holds the offset terms of the
  // group's blocks for token t at sums + t * nb. Returns the blocks' fields (the dwords at
  // byte 0: d, and m for Q4_1/Q5_1).
  template <int T, class Y>
  [[gnu::always_inline]] static __m512i block_sums(const uint8_t* wb, int m, const Y* y,
                                                   const int32_t* sums, int64_t nb, __m512i* isum) {
    __m512i W[8];
    for (int t = 0; t < T; ++t) {
      isum[t] = kOffsetDot && sums != nullptr ? y[t].terms(sums + t * nb) : _mm512_setzero_si512();
    }
    if constexpr (WF::kSigned && !kOffsetDot) {  // |w| against y with w's sign (|w| <= 128)
      WF::weights(wb, m, W);
      for (int k = 0; k < 8; ++k) {
        const __mmask64 neg = _mm512_movepi8_mask(W[k]);
        const __m512i aw = _mm512_abs_epi8(W[k]);
        for (int t = 0; t < T; ++t) {
          const __m512i yk = y[t].row(k, kFields);
          isum[t] =
              dot_u8s8_acc(isum[t], aw, _mm512_mask_sub_epi8(yk, neg, _mm512_setzero_si512(), yk));
        }
      }
      return gather_fields(wb, sizeof(Block), m, 0);
    }
    const __m512i fields = WF::unsigned_weights(wb, sizeof(Block), m, W);
    const __m512i ones = _mm512_set1_epi8(1);
    [[maybe_unused]] __m512i ysum[T];
    for (int t = 0; t < T; ++t) ysum[t] = _mm512_setzero_si512();
    const bool inline_sums = kOffsetDot && sums == nullptr;
    for (int k = 0; k < 8; ++k) {
      for (int t = 0; t < T; ++t) {
        const __m512i yk = y[t].row(k, kFields);
        isum[t] = dot_u8s8_acc(isum[t], W[k], yk);
        if (inline_sums) ysum[t] = dot_u8s8_acc(ysum[t], ones, yk);
      }
    }
    if (inline_sums) {
      const __m512i offset = _mm512_set1_epi32(WF::kOffset);
      for (int t = 0; t < T; ++t)
        isum[t] = _mm512_sub_epi32(isum[t], _mm512_mullo_epi32(ysum[t], offset));
    }
    return fields;
  }

  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    dot_with_sums<T>(n, wr, x, xs, nullptr, out, prefetch);
  }

  template <int T>
  static void dot_with_sums(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs,
                            const int32_t* sums, float* out, bool prefetch) {
    __m512 acc[T], accm[T];
    for (int t = 0; t < T; ++t) acc[t] = accm[t] = _mm512_setzero_ps();
    const int64_t nb = n / quant::kQK;
    for (int64_t b0 = 0; b0 < nb; b0 += kLanes) {
      const int m = group_size(nb, b0);
      const uint8_t* wb = wr + b0 * sizeof(Block);
      if (prefetch) prefetch_ahead(wb, kLanes * sizeof(Block));
      ActGroup y[T];
      for (int t = 0; t < T; ++t) y[t] = {x + t * xs + b0 * kActBlock, m};
      __m512i isum[T];
      const __m512i fields = block_sums<T>(wb, m, y, sums ? sums + b0 : nullptr, nb, isum);
      const __m512 dw = weight_scales<Block>(fields);
      for (int t = 0; t < T; ++t) {
        acc[t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, y[t].halves(0)), acc[t]);
      }
      if constexpr (kMin) {
        const __m512 mw = halves_of(fields, true);
        for (int t = 0; t < T; ++t) accm[t] = _mm512_fmadd_ps(mw, y[t].halves(1), accm[t]);
      }
    }
    for (int t = 0; t < T; ++t) {
      out[t] = kMin ? hsum512(acc[t]) + hsum512(accm[t]) : hsum512(acc[t]);
    }
  }

  // Rows of 8 blocks (256 columns, small models) fill half a group's lanes. Where they lie
  // back to back, two rows share the lanes (row r in 0-7, r + 1 in 8-15) against the
  // token's group repeated in both halves, and each half is summed as hsum512 sums a lone
  // row's vector (its upper half +0): the same bits, for half the vector work.
  template <int T>
  static void dot_pair(const uint8_t* wr, const uint8_t* x, size_t xs, const int32_t* sums,
                       float (*out)[kMaxTok], bool prefetch) {
    constexpr int kBlocks = ActPair::kBlocks;
    if (prefetch) prefetch_ahead(wr, 2 * kBlocks * sizeof(Block));
    ActPair y[T];
    for (int t = 0; t < T; ++t) y[t] = {x + t * xs};
    __m512i isum[T];
    const __m512i fields = block_sums<T>(wr, kLanes, y, sums, kBlocks, isum);
    const __m512 dw = weight_scales<Block>(fields);
    const __m256 zero = _mm256_setzero_ps();
    const auto half_sum = [&](__m512 v, int h) {
      return hsum256(
          _mm256_add_ps(h == 0 ? _mm512_castps512_ps256(v)
                               : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)),
                        zero));
    };
    for (int t = 0; t < T; ++t) {
      const __m512 acc =
          _mm512_mul_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, y[t].halves(0)));
      for (int h = 0; h < 2; ++h) out[h][t] = half_sum(acc, h);
      if constexpr (kMin) {
        const __m512 accm = _mm512_mul_ps(halves_of(fields, true), y[t].halves(1));
        for (int h = 0; h < 2; ++h) out[h][t] += half_sum(accm, h);
      }
    }
  }

  // tile_of's loop, with the offset terms of each token group taken once for its rows, and
  // rows of 256 columns in pairs.
  static void tile(int64_t n, const void* w, size_t w_stride, int n_rows, const void* x,
                   size_t x_stride, int n_tok, float* y, size_t y_stride) {
    const int64_t nb = n / quant::kQK;
    const bool pairs = nb == ActPair::kBlocks && w_stride == ActPair::kBlocks * sizeof(Block);
    if (!pairs && (!kOffsetDot || nb > kMaxSumBlocks)) {
      tile_of<Legacy32, kMaxTok>(n, w, w_stride, n_rows, x, x_stride, n_tok, y, y_stride);
      return;
    }
    using DotFn =
        void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, const int32_t*, float*, bool);
    using PairFn =
        void (*)(const uint8_t*, const uint8_t*, size_t, const int32_t*, float(*)[kMaxTok], bool);
    static constexpr auto dots = []<int... I>(std::integer_sequence<int, I...>) {
      return std::array<DotFn, kMaxTok>{&dot_with_sums<I + 1>...};
    }
    (std::make_integer_sequence<int, kMaxTok>{});
    static constexpr auto pair_dots = []<int... I>(std::integer_sequence<int, I...>) {
      return std::array<PairFn, kMaxTok>{&dot_pair<I + 1>...};
    }
    (std::make_integer_sequence<int, kMaxTok>{});
    alignas(64) int32_t sums[kOffsetDot ? kMaxTok * kMaxSumBlocks : 1];
    const int32_t* terms = kOffsetDot ? sums : nullptr;
    const auto* xb = static_cast<const uint8_t*>(x);
    const auto* wb = static_cast<const uint8_t*>(w);
    float out[2][kMaxTok];
    for (int t0 = 0; t0 < n_tok; t0 += kMaxTok) {
      const int nt = n_tok - t0 < kMaxTok ? n_tok - t0 : kMaxTok;
      const uint8_t* xt = xb + t0 * x_stride;
      if constexpr (kOffsetDot) offset_sums<kFields>(nb, xt, x_stride, nt, WF::kOffset, sums);
      int r = 0;
      for (; pairs && r + 1 < n_rows; r += 2) {
        pair_dots[nt - 1](wb + r * w_stride, xt, x_stride, terms, out, t0 == 0);
        for (int t = 0; t < nt; ++t) {
          y[(t0 + t) * y_stride + r] = out[0][t];
          y[(t0 + t) * y_stride + r + 1] = out[1][t];
        }
      }
      for (; r < n_rows; ++r) {
        dots[nt - 1](n, wb + r * w_stride, xt, x_stride, terms, out[0], t0 == 0);
        for (int t = 0; t < nt; ++t) y[(t0 + t) * y_stride + r] = out[0][t];
      }
    }
  }
};

#if defined(__AVX512VNNI__)
// ---- 32-element formats on the VNNI levels: row-interleaved tiles for prompts ----
//
// Legacy32 puts 16 blocks of one row in the lanes, so a row's last group leaves lanes idle
// (576 columns are 18 blocks in 32 lanes, 640 are 20) and every (row, token) ends in a
// horizontal sum. Rows32 puts one block of 16 rows in the lanes instead: lane L of every
// vector belongs to row r0 + L, so the lanes are full whatever the row width, and a
// token's 16 outputs leave in one store. It computes what Legacy32 computes, bit for bit:
// per row, partial sum j takes blocks j, j + 16, ... in order with the same float
// operations as Legacy32's lane j (a vector per token, lanes = rows), and the 16 partials
// meet in hsum512's order. So a tile picks either by its token count (Legacy32
// for a few tokens: it reads each row as one stream, which decode needs) and results stay
// batch-invariant.
//
// The weights are unsigned (the format's values plus kOffset, transposed per block, once
// per 16-row group for all the tile's tokens), so the exact integer dot product is
// dpbusd(u, y) - kOffset * sum(y), with the activation sums taken once per span of tokens.
// dpbusd adds into int32 without 16-bit steps, so Q8_0's u up to 255 does not saturate
// (hence VNNI only). Activations are Legacy32's transposed groups. Each token's dot is its
// own chain, eight in flight (one chain per token, eight dpbusd deep, left the pipes idle),
// and the partials live in L1 while a group's blocks pass, so an activation cache line
// (dword k of 16 blocks) serves its 16 blocks back to back rather than once per partial.
template <class WF>
struct Rows32 {
  using Block = typename WF::Block;
  static constexpr bool kMin = !WF::kSigned;
  static constexpr int kFields = kMin ? 2 : 1;  // fp16 fields ahead of a group's rows
  static constexpr size_t kActBlock = kMin ? sizeof(BlockQ8_1) : sizeof(BlockQ8_0);
  // Tokens of one rows() call: 16, but 8 for the formats with a minimum, whose two sets of
  // partials for 16 tokens (32 KB) crowded L1 (measured a quarter slower).
  static constexpr int kTok = kMin ? 8 : 16;
  static constexpr int kMinTokens = 4;         // fewer: Legacy32
  static constexpr int64_t kMaxBlocks = 1024;  // wider rows (32768 columns): Legacy32

  // scales[t * nb + b] (and mins[...] for the formats with a minimum): token t's fp16
  // scale (and d * sum) of block b widened once per span of tokens, so the token loop
  // broadcasts a float from memory instead of converting a half per (token, block).
  static void act_scales(int64_t nb, const uint8_t* x, size_t xs, int nt, float* scales,
                         float* mins) {
    for (int t = 0; t < nt; ++t) {
      for (int64_t b0 = 0; b0 < nb; b0 += kLanes) {
        const int g = group_size(nb, b0);
        const uint8_t* group = x + t * xs + b0 * kActBlock;
        const __mmask16 mask = lane_mask(g);
        _mm512_mask_storeu_ps(scales + t * nb + b0, mask,
                              _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, group)));
        if constexpr (kMin) {
          _mm512_mask_storeu_ps(mins + t * nb + b0, mask,
                                _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, group + 2 * g)));
        }
      }
    }
  }

  // hsum512's order over 16 vectors, lane by lane: (p0 + p8) + (p4 + p12) ... as it pairs
  // the halves, then the quarters, then the pairs.
  static __m512 sum16(const __m512* p) {
    __m512 h[8], q[4];
    for (int j = 0; j < 8; ++j) h[j] = _mm512_add_ps(p[j], p[j + 8]);
    for (int j = 0; j < 4; ++j) q[j] = _mm512_add_ps(h[j], h[j + 4]);
    return _mm512_add_ps(_mm512_add_ps(q[0], q[2]), _mm512_add_ps(q[1], q[3]));
  }

  // One block of 16 rows as rows() reads it: unsigned weights, scales (and minimums).
  struct Unpacked {
    __m512i w[8];
    __m512 d, min;
  };
  // Rows of up to this many blocks (8192 columns) are unpacked once per 16-row group and
  // read back for every token chunk; wider ones are unpacked again for each chunk.
  static constexpr int64_t kUnpackedBlocks = 256;
  // (token, block) activation terms held at once: a span of kActEntries / nb tokens.
  static constexpr int64_t kActEntries = 16 * kMaxBlocks;

  static void unpack(const uint8_t* wb, size_t ws, int m, Unpacked* u) {
    const __m512i fields = WF::unsigned_weights(wb, ws, m, u->w);
    u->d = weight_scales<Block>(fields);
    if constexpr (kMin) u->min = halves_of(fields, true);
  }

  // Tokens T0 .. T0 + N - 1 against block b (partial j): their exact dots as N independent
  // chains, weight vector k loaded once for all of them, then part[t][j] += dot * (d_w *
  // d_y); kFirst: the partials start from zero here.
  template <int T0, int N, bool kFirst>
  static void block_tokens(const Unpacked& u, const uint8_t* dword0, size_t xs, int g, int64_t b,
                           int j, int64_t nb, const int32_t* sums, const float* scales,
                           __m512 (*part)[kLanes]) {
    __m512i isum[N];
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      isum[i] =
          WF::kOffset != 0 ? _mm512_set1_epi32(sums[(T0 + i) * nb + b]) : _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512i wk = u.w[k];
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        int32_t q4;
        std::memcpy(&q4, dword0 + (T0 + i) * xs + 4 * k * g, 4);
        isum[i] = _mm512_dpbusd_epi32(isum[i], wk, _mm512_set1_epi32(q4));
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const int64_t tb = (T0 + i) * nb + b;
      __m512& acc = part[T0 + i][j];
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]),
                            _mm512_mul_ps(u.d, _mm512_set1_ps(scales[tb])),
                            kFirst ? _mm512_setzero_ps() : acc);
    }
  }

  // The formats with a minimum: part_m[t][j] = sum of m_w * s_y over blocks j, j + 16, ...
  // in order, Legacy32's second accumulator, in registers over a partial's blocks.
  template <int T, bool kStored>
  static void min_partials(int64_t nb, const uint8_t* w, size_t ws, int m, const Unpacked* stored,
                           const float* mins, __m512 (*part_m)[kLanes]) {
    for (int j = 0; j < kLanes; ++j) {
      __m512 accm[T];
      for (int t = 0; t < T; ++t) accm[t] = _mm512_setzero_ps();
      for (int64_t b = j; b < nb; b += kLanes) {
        const __m512 mw = kStored ? stored[b].min
                                  : halves_of(gather_fields(w + b * sizeof(Block), ws, m, 0), true);
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
          accm[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(mins[t * nb + b]), accm[t]);
        }
      }
      for (int t = 0; t < T; ++t) part_m[t][j] = accm[t];
    }
  }

  // Rows r < m of w against T tokens: y[t * ys + r]. Partial j takes blocks j, j + 16, ...
  // in order; the partials rest in L1 while a group's 16 blocks pass, so each activation
  // row k of the group (a cache line: dword k of its 16 blocks) is read while it is hot.
  // kStored: block b's weights are stored[b]; else they are unpacked from w here.
  template <int T, bool kStored>
  static void rows(int64_t nb, const uint8_t* w, size_t ws, int m, const Unpacked* stored,
                   const uint8_t* x, size_t xs, const int32_t* sums, const float* scales,
                   const float* mins, float* y, size_t ys) {
    // Dot chains in flight at once: 8 keep isum[] and the operands within 32 registers.
    constexpr int kChains = 8;
    alignas(64) __m512 part[T][kLanes], part_m[kMin ? T : 1][kLanes];
    const auto tokens = [&]<bool kFirst>(const Unpacked& u, const uint8_t* dword0, int g, int64_t b,
                                         int j) {
      block_tokens<0, (T < kChains ? T : kChains), kFirst>(u, dword0, xs, g, b, j, nb, sums, scales,
                                                           part);
      if constexpr (T > kChains) {
        block_tokens<kChains, T - kChains, kFirst>(u, dword0, xs, g, b, j, nb, sums, scales, part);
      }
    };
    for (int64_t b0 = 0; b0 < nb; b0 += kLanes) {
      const int g = group_size(nb, b0);
      const uint8_t* group = x + b0 * kActBlock;  // token 0's activation group
      for (int j = 0; j < g; ++j) {
        Unpacked local;
        const Unpacked* u = &local;
        if constexpr (kStored) {
          u = &stored[b0 + j];
        } else {
          unpack(w + (b0 + j) * sizeof(Block), ws, m, &local);
        }
        const uint8_t* dword0 = group + 2 * kFields * g + 4 * j;  // dword 0 of block j
        if (b0 == 0) {
          tokens.template operator()<true>(*u, dword0, g, j, j);
        } else {
          tokens.template operator()<false>(*u, dword0, g, b0 + j, j);
        }
      }
    }
    for (int j = static_cast<int>(nb); j < kLanes; ++j) {  // rows of fewer than 16 blocks
      for (int t = 0; t < T; ++t) part[t][j] = _mm512_setzero_ps();
    }
    if constexpr (kMin) min_partials<T, kStored>(nb, w, ws, m, stored, mins, part_m);
    const __mmask16 mask = lane_mask(m);
    for (int t = 0; t < T; ++t) {
      __m512 out = sum16(part[t]);
      if constexpr (kMin) out = _mm512_add_ps(out, sum16(part_m[t]));
      _mm512_mask_storeu_ps(y + t * ys, mask, out);
    }
  }

  // Loop order: spans of tokens (their activation terms taken once), then 16-row groups
  // (unpacked once per span where the row fits), then chunks of kTok tokens.
  static void tile(int64_t n, const void* w, size_t w_stride, int n_rows, const void* x,
                   size_t x_stride, int n_tok, float* y, size_t y_stride) {
    const int64_t nb = n / quant::kQK;
    if (n_tok < kMinTokens || nb > kMaxBlocks) {
      Legacy32<WF>::tile(n, w, w_stride, n_rows, x, x_stride, n_tok, y, y_stride);
      return;
    }
    using RowsFn = void (*)(int64_t, const uint8_t*, size_t, int, const Unpacked*, const uint8_t*,
                            size_t, const int32_t*, const float*, const float*, float*, size_t);
    static constexpr auto fns = []<int... I>(std::integer_sequence<int, I...>) {
      return std::array<std::array<RowsFn, kTok>, 2>{
          std::array<RowsFn, kTok>{&rows<I + 1, false>...},
          std::array<RowsFn, kTok>{&rows<I + 1, true>...}};
    }
    (std::make_integer_sequence<int, kTok>{});
    // On the stack: no std containers in ISA code (check_isa_symbols.cmake).
    alignas(64) int32_t sums[WF::kOffset != 0 ? kActEntries : 1];
    alignas(64) float scales[kActEntries], mins[kMin ? kActEntries : 1];
    alignas(64) Unpacked stored[kUnpackedBlocks];
    const bool store = nb <= kUnpackedBlocks;
    const int span = static_cast<int>(kActEntries / nb / kTok * kTok);  // >= kTok
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* xb = static_cast<const uint8_t*>(x);
    for (int s0 = 0; s0 < n_tok; s0 += span) {
      const int ns = n_tok - s0 < span ? n_tok - s0 : span;
      const uint8_t* xs = xb + s0 * x_stride;
      if constexpr (WF::kOffset != 0) offset_sums<kFields>(nb, xs, x_stride, ns, WF::kOffset, sums);
      act_scales(nb, xs, x_stride, ns, scales, mins);
      for (int r0 = 0; r0 < n_rows; r0 += kLanes) {
        const int m = n_rows - r0 < kLanes ? n_rows - r0 : kLanes;
        const uint8_t* wr = wb + r0 * w_stride;
        if (store) {
          for (int64_t b = 0; b < nb; ++b) unpack(wr + b * sizeof(Block), w_stride, m, &stored[b]);
        }
        for (int t0 = 0; t0 < ns; t0 += kTok) {
          const int nt = ns - t0 < kTok ? ns - t0 : kTok;
          fns[store][nt - 1](nb, wr, w_stride, m, stored, xs + t0 * x_stride, x_stride,
                             sums + (WF::kOffset != 0 ? t0 * nb : 0), scales + t0 * nb,
                             mins + (kMin ? t0 * nb : 0), y + (s0 + t0) * y_stride + r0, y_stride);
        }
      }
    }
  }
};
#endif  // __AVX512VNNI__

// ---- float weights against F32 activations ----

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m512 load(const uint8_t* w, int64_t i) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(w) + i);
  }
  static __m512 load_tail(const uint8_t* w, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(w) + i);
  }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m512 load(const uint8_t* w, int64_t i) { return _mm512_cvtph_ps(load256(w + 2 * i)); }
  static __m512 load_tail(const uint8_t* w, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + 2 * i));
  }
};
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load(const uint8_t* w, int64_t i) { return widen(load256(w + 2 * i)); }
  static __m512 load_tail(const uint8_t* w, int64_t i, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, w + 2 * i));
  }
};

// Two accumulators over 32-element steps, then 16-element and masked tails into the first.
template <class L>
struct FloatDot {
  template <int T>
  static void dot(int64_t n, const uint8_t* w, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    const float* y[T];
    for (int t = 0; t < T; ++t) y[t] = reinterpret_cast<const float*>(x + t * xs);
    __m512 a0[T], a1[T];
    for (int t = 0; t < T; ++t) a0[t] = a1[t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      if (prefetch) prefetch_ahead(w + i * L::kBytes, 32 * L::kBytes);
      const __m512 w0 = L::load(w, i), w1 = L::load(w, i + 16);
      for (int t = 0; t < T; ++t) {
        a0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(y[t] + i), a0[t]);
        a1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(y[t] + i + 16), a1[t]);
      }
    }
    for (; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
      const __m512 w0 = L::load_tail(w, i, m);
      for (int t = 0; t < T; ++t)
        a0[t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, y[t] + i), a0[t]);
    }
    for (int t = 0; t < T; ++t) out[t] = hsum512(_mm512_add_ps(a0[t], a1[t]));
  }
};

void fill_avx512_table(KernelTable* table) {
  auto set = [&](gguf::GgmlType type, TileFn fn) { table->tile[static_cast<int>(type)] = fn; };
  set(gguf::GgmlType::F32, tile_of<FloatDot<LoadF32>>);
  set(gguf::GgmlType::F16, tile_of<FloatDot<LoadF16>>);
  set(gguf::GgmlType::BF16, tile_of<FloatDot<LoadBF16>>);
#if defined(__AVX512VNNI__)
  set(gguf::GgmlType::Q8_0, Rows32<WQ8_0>::tile);
  set(gguf::GgmlType::Q4_0, Rows32<WQ4_0>::tile);
  set(gguf::GgmlType::Q5_0, Rows32<WQ5_0>::tile);
  set(gguf::GgmlType::Q4_1, Rows32<WQ4_1>::tile);
  set(gguf::GgmlType::Q5_1, Rows32<WQ5_1>::tile);
  set(gguf::GgmlType::MXFP4, Rows32<WMXFP4>::tile);
#else
  set(gguf::GgmlType::Q8_0, Legacy32<WQ8_0>::tile);
  set(gguf::GgmlType::Q4_0, Legacy32<WQ4_0>::tile);
  set(gguf::GgmlType::Q5_0, Legacy32<WQ5_0>::tile);
  set(gguf::GgmlType::Q4_1, Legacy32<WQ4_1>::tile);
  set(gguf::GgmlType::Q5_1, Legacy32<WQ5_1>::tile);
  set(gguf::GgmlType::MXFP4, Legacy32<WMXFP4>::tile);
#endif
  set(gguf::GgmlType::Q2_K, tile_of<Q2K, 8>);
  set(gguf::GgmlType::Q3_K, tile_of<Q3K, 8>);
  set(gguf::GgmlType::Q4_K, tile_of<QK4<false>, 8>);
  set(gguf::GgmlType::Q5_K, tile_of<QK4<true>, 8>);
  auto act = [&](gguf::GgmlType type, QuantizeActFn fn) {
    table->quantize_act[static_cast<int>(type)] = fn;
  };
  act(gguf::GgmlType::Q4_K, quantize_q8_k_nibble_order);
  act(gguf::GgmlType::Q5_K, quantize_q8_k_nibble_order);
  act(gguf::GgmlType::Q2_K, quantize_q8_k_avx512);
  act(gguf::GgmlType::Q3_K, quantize_q8_k_avx512);
  act(gguf::GgmlType::Q6_K, quantize_q8_k_avx512);
  act(gguf::GgmlType::Q8_0, quantize_grouped<false>);
  act(gguf::GgmlType::Q4_0, quantize_grouped<false>);
  act(gguf::GgmlType::Q5_0, quantize_grouped<false>);
  act(gguf::GgmlType::MXFP4, quantize_grouped<false>);
  act(gguf::GgmlType::Q4_1, quantize_grouped<true>);
  act(gguf::GgmlType::Q5_1, quantize_grouped<true>);
  set(gguf::GgmlType::Q6_K, tile_of<Q6K, 8>);
}

}  // namespace
}  // namespace hypura::compute
