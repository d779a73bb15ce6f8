// AVX2 + FMA + F16C kernels (built with -mavx2 -mfma -mf16c; see src/compute/CMakeLists.txt).
//
// Same structure as the AVX-512 file at 256 bits: weights unpacked to unsigned bytes,
// maddubs against the activation bytes, madd with per-sub-block int16 scales, offsets and
// minimums through the Q8_K per-16 sums, floats entering once per block. Weights of one
// row are unpacked once per block and reused for up to four activation rows.
#include <immintrin.h>

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

// acc + pair sums of (u8 w * s8 y) times the int16 lanes of s.
inline __m256i dot_scaled(__m256i acc, __m256i w, __m256i y, __m256i s) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), s));
}

// Eight-scale blocks (Q4_K/Q5_K): S[j] = scale j in every int16 lane.
inline void broadcast8(uint64_t sc8, __m256i* S) {
  const __m256i v = _mm256_broadcastsi128_si256(
      _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc8))));
  for (int j = 0; j < 8; ++j)
    S[j] = _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * j)));
}

// Sixteen-scale blocks (Q2_K/Q3_K/Q6_K): S[k] = scale 2k in the low 128 bits, 2k+1 in
// the high 128 bits (the two 16-element halves of 32-element chunk k). sc16: 16 words.
inline void broadcast16(__m256i sc16, __m256i* S) {
  const __m256i lo = _mm256_unpacklo_epi16(sc16, sc16);  // dwords s0..s3 | s8..s11
  const __m256i hi = _mm256_unpackhi_epi16(sc16, sc16);  // dwords s4..s7 | s12..s15
  const __m256i idx_a = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const __m256i idx_b = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
  const __m256i idx_c = _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5);
  const __m256i idx_d = _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7);
  S[0] = _mm256_permutevar8x32_epi32(lo, idx_a);
  S[1] = _mm256_permutevar8x32_epi32(lo, idx_b);
  S[2] = _mm256_permutevar8x32_epi32(hi, idx_a);
  S[3] = _mm256_permutevar8x32_epi32(hi, idx_b);
  S[4] = _mm256_permutevar8x32_epi32(lo, idx_c);
  S[5] = _mm256_permutevar8x32_epi32(lo, idx_d);
  S[6] = _mm256_permutevar8x32_epi32(hi, idx_c);
  S[7] = _mm256_permutevar8x32_epi32(hi, idx_d);
}

// Bytes 0xFF where bit j of x is set (j < 32).
inline __m256i bytes_from_bits(uint32_t x) {
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                          0x0202020202020202, 0x0303030303030303);
  const __m256i bits = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i v =
      _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf), bits);
  return _mm256_cmpeq_epi8(v, bits);
}

// 2-bit plane of Q2_K / Q3_K: W[k] = elements 32k..32k+31 as bytes 0..3.
inline void unpack_2bit(const uint8_t* qs, __m256i* W) {
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int c = 0; c < 2; ++c) {
    const __m256i q = load256(qs + 32 * c);
    W[4 * c + 0] = _mm256_and_si256(q, m3);
    W[4 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
    W[4 * c + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
    W[4 * c + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
  }
}

// Adds `value` to the bytes of W[k] whose bit k of the 32-byte mask vector is set.
inline void add_bit_plane(const uint8_t* mask32, int value, __m256i* W) {
  const __m256i hm = load256(mask32);
  for (int k = 0; k < 8; ++k) {
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << k));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
    W[k] = _mm256_or_si256(W[k], _mm256_and_si256(set, _mm256_set1_epi8(static_cast<char>(value))));
  }
}

// The sum over 8 chunks of 32 weights for one token, plus the float update.
inline __m256i chunk_sum(const __m256i* W, const __m256i* S, const int8_t* yq) {
  __m256i isum = _mm256_setzero_si256();
  for (int k = 0; k < 8; ++k) isum = dot_scaled(isum, W[k], load256(yq + 32 * k), S[k]);
  return isum;
}

// ---- K-quants ----

template <bool kFive>
struct QK4 {  // Q4_K (kFive = false) and Q5_K (kFive = true)
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    const auto* w = reinterpret_cast<const Block*>(wr);
    const BlockQ8_K* y[T];
    act_rows<BlockQ8_K, T>(x, xs, y);
    __m256 acc[T], accm[T];
    for (int t = 0; t < T; ++t) acc[t] = accm[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / quant::kQK_K; ++i) {
      if (prefetch) prefetch_ahead(w + i, sizeof(*w));
      uint64_t sc8, m8;
      unpack_k4(w[i].scales, &sc8, &m8);
      __m256i S[8], W[8];
      broadcast8(sc8, S);
      const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(m8)));
      const __m256i mins =
          _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
      for (int c = 0; c < 4; ++c) {
        const __m256i q = load256(w[i].qs + 32 * c);
        W[2 * c] = _mm256_and_si256(q, m4);
        W[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      }
      if constexpr (kFive) add_bit_plane(w[i].qh, 16, W);
      const float dw = h2f(w[i].d), dmin = h2f(w[i].dmin);
      for (int t = 0; t < T; ++t) {
        const __m256i isum = chunk_sum(W, S, y[t][i].qs);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * y[t][i].d), acc[t]);
        const __m256i msum = _mm256_madd_epi16(load256(y[t][i].bsums), mins);
        accm[t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * y[t][i].d), accm[t]);
      }
    }
    for (int t = 0; t < T; ++t) out[t] = hsum256(acc[t]) - hsum256(accm[t]);
  }
};

struct Q6K {
  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    const auto* w = reinterpret_cast<const BlockQ6_K*>(wr);
    const BlockQ8_K* y[T];
    act_rows<BlockQ8_K, T>(x, xs, y);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < n / quant::kQK_K; ++i) {
      if (prefetch) prefetch_ahead(w + i, sizeof(*w));
      const __m256i sc16 = _mm256_cvtepi8_epi16(load128(w[i].scales));
      __m256i S[8], W[8];
      broadcast16(sc16, S);
      for (int c = 0; c < 2; ++c) {
        const __m256i l0 = load256(w[i].ql + 64 * c), l1 = load256(w[i].ql + 64 * c + 32);
        const __m256i h = load256(w[i].qh + 32 * c);
        const __m256i lows[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                                 _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                 _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
        for (int s = 0; s < 4; ++s) {
          const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(h, 2 * s), m2);
          W[4 * c + s] = _mm256_or_si256(lows[s], _mm256_slli_epi16(hb, 4));
        }
      }
      const float dw = h2f(w[i].d);
      for (int t = 0; t < T; ++t) {
        __m256i isum = chunk_sum(W, S, y[t][i].qs);
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load256(y[t][i].bsums), sc16), 5);
        isum = _mm256_sub_epi32(isum, corr);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * y[t][i].d), acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) out[t] = hsum256(acc[t]);
  }
};

struct Q3K {
  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    const auto* w = reinterpret_cast<const BlockQ3_K*>(wr);
    const BlockQ8_K* y[T];
    act_rows<BlockQ8_K, T>(x, xs, y);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / quant::kQK_K; ++i) {
      if (prefetch) prefetch_ahead(w + i, sizeof(*w));
      const __m256i sc16 = _mm256_cvtepi8_epi16(unpack_q3k_scales(w[i].scales));
      __m256i S[8], W[8];
      broadcast16(sc16, S);
      unpack_2bit(w[i].qs, W);
      add_bit_plane(w[i].hmask, 4, W);
      const float dw = h2f(w[i].d);
      for (int t = 0; t < T; ++t) {
        __m256i isum = chunk_sum(W, S, y[t][i].qs);
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load256(y[t][i].bsums), sc16), 2);
        isum = _mm256_sub_epi32(isum, corr);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * y[t][i].d), acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) out[t] = hsum256(acc[t]);
  }
};

struct Q2K {
  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    const auto* w = reinterpret_cast<const BlockQ2_K*>(wr);
    const BlockQ8_K* y[T];
    act_rows<BlockQ8_K, T>(x, xs, y);
    __m256 acc[T], accm[T];
    for (int t = 0; t < T; ++t) acc[t] = accm[t] = _mm256_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / quant::kQK_K; ++i) {
      if (prefetch) prefetch_ahead(w + i, sizeof(*w));
      const __m128i s = load128(w[i].scales);
      const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s, m4));
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4));
      __m256i S[8], W[8];
      broadcast16(sc16, S);
      unpack_2bit(w[i].qs, W);
      const float dw = h2f(w[i].d), dmin = h2f(w[i].dmin);
      for (int t = 0; t < T; ++t) {
        const __m256i isum = chunk_sum(W, S, y[t][i].qs);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * y[t][i].d), acc[t]);
        const __m256i msum = _mm256_madd_epi16(load256(y[t][i].bsums), mins);
        accm[t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * y[t][i].d), accm[t]);
      }
    }
    for (int t = 0; t < T; ++t) out[t] = hsum256(acc[t]) - hsum256(accm[t]);
  }
};

// ---- 32-element formats ----

inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = load128(qs);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

inline __m256i with_bit4(__m256i q, const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  return _mm256_or_si256(q, _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(0x10)));
}

struct WQ8_0 {
  using Block = BlockQ8_0;
  static __m256i weights(const Block& b) { return load256(b.qs); }
};
struct WQ4_0 {
  using Block = BlockQ4_0;
  static __m256i weights(const Block& b) {
    return _mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_set1_epi8(8));
  }
};
struct WQ5_0 {
  using Block = BlockQ5_0;
  static __m256i weights(const Block& b) {
    return _mm256_sub_epi8(with_bit4(unpack_nibbles(b.qs), b.qh), _mm256_set1_epi8(16));
  }
};
// MXFP4: the nibbles are codes, looked up in the doubled E2M1 values (one table per lane;
// written out here rather than read from quant::kMxfp4Values: see check_isa_symbols.cmake).
struct WMXFP4 {
  using Block = BlockMXFP4;
  static __m256i weights(const Block& b) {
    const __m256i values = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    return _mm256_shuffle_epi8(values, unpack_nibbles(b.qs));
  }
};
struct WQ4_1 {
  using Block = BlockQ4_1;
  static __m256i weights(const Block& b) { return unpack_nibbles(b.qs); }
};
struct WQ5_1 {
  using Block = BlockQ5_1;
  static __m256i weights(const Block& b) { return with_bit4(unpack_nibbles(b.qs), b.qh); }
};

// The legacy kernels' own activation layout (their quantize_act below): each run of four
// whole blocks of a row is one group with the four scales (and sums) side by side, so a
// single load gives them as a vector and four blocks' integer sums meet one float
// update instead of four; a row's last n_blocks % 4 blocks keep the standard layout.
// Sizes equal the standard blocks', as the KernelTable contract requires.
constexpr int kGroup = 4;
struct GroupQ8_0 {
  int8_t qs[kGroup * quant::kQK];
  uint16_t d[kGroup];
};
struct GroupQ8_1 {
  int8_t qs[kGroup * quant::kQK];
  uint16_t d[kGroup];
  uint16_t s[kGroup];  // d * sum(qs) of each block
};
static_assert(sizeof(GroupQ8_0) == kGroup * sizeof(BlockQ8_0));
static_assert(sizeof(GroupQ8_1) == kGroup * sizeof(BlockQ8_1));

// 32 floats to int8 as the reference activation quantizer does (id = 127 / amax, round
// half to even): the same quants and scale bits. Returns amax / 127; *sum = sum of qs.
inline float quantize_block32(const float* x, int8_t* qs, int* sum) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
  const __m256 m =
      _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                    _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
  const float amax = hmax256(m);
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
  const __m256i all = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(all), _mm256_extracti128_si256(all, 1));
  const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
  *sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
  // packs work per 128-bit lane: restore element order with one dword permute.
  const __m256i p =
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return amax / 127.0f;
}

template <bool kSums>
void quantize_grouped(const float* x, void* vy, int64_t n) {
  using Group = std::conditional_t<kSums, GroupQ8_1, GroupQ8_0>;
  using Block = std::conditional_t<kSums, BlockQ8_1, BlockQ8_0>;
  const int64_t nb = n / quant::kQK, ng = nb / kGroup;
  auto* g = static_cast<Group*>(vy);
  int sum;
  for (int64_t gi = 0; gi < ng; ++gi) {
    for (int k = 0; k < kGroup; ++k) {
      const float d =
          quantize_block32(x + (gi * kGroup + k) * quant::kQK, g[gi].qs + quant::kQK * k, &sum);
      g[gi].d[k] = f2h(d);
      if constexpr (kSums) g[gi].s[k] = f2h(d * static_cast<float>(sum));
    }
  }
  auto* tail = reinterpret_cast<Block*>(g + ng);
  for (int64_t b = 0; b < nb - ng * kGroup; ++b) {
    const float d = quantize_block32(x + (ng * kGroup + b) * quant::kQK, tail[b].qs, &sum);
    tail[b].d = f2h(d);
    if constexpr (kSums) tail[b].s = f2h(d * static_cast<float>(sum));
  }
}

// Four fp16 fields of consecutive weight blocks as floats.
template <class Block, uint16_t Block::*Field>
inline __m128 four_halves(const Block* b) {
  return _mm_cvtph_ps(
      _mm_setr_epi16(static_cast<short>(b[0].*Field), static_cast<short>(b[1].*Field),
                     static_cast<short>(b[2].*Field), static_cast<short>(b[3].*Field), 0, 0, 0, 0));
}

inline __m128 load_halves4(const uint16_t* h) {
  return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(h)));
}

// 2^(e - 128) for four E8M0 bytes (quant::e8m0_half_to_f32: subnormal below e = 2).
inline __m128 e8m0_half4(__m128i e) {
  const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
  const __m128i tiny = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);
  return _mm_castsi128_ps(_mm_blendv_epi8(tiny, normal, _mm_cmpgt_epi32(e, _mm_set1_epi32(1))));
}

// The scale of one block and of four consecutive blocks: fp16 d, or MXFP4's E8M0 e.
template <class Block>
inline __m128 block_scales4(const Block* b) {
  if constexpr (std::is_same_v<Block, BlockMXFP4>) {
    return e8m0_half4(_mm_setr_epi32(b[0].e, b[1].e, b[2].e, b[3].e));
  } else {
    return four_halves<Block, &Block::d>(b);
  }
}
template <class Block>
inline float block_scale(const Block& b) {
  if constexpr (std::is_same_v<Block, BlockMXFP4>) {
    return _mm_cvtss_f32(e8m0_half4(_mm_cvtsi32_si128(b.e)));
  } else {
    return h2f(b.d);
  }
}

// Block sums of four madd results (8 int32 lanes each): lanes k and k + 4 of the result
// are the two halves of block k's sum, so one float update scales all four blocks.
inline __m256 group_sums(const __m256i* s) {
  return _mm256_cvtepi32_ps(
      _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3])));
}

// Signed weights (Q4_0, Q5_0, Q8_0, MXFP4) against grouped Q8_0 activations.
template <class WF>
struct LegacySigned {
  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    using Block = typename WF::Block;
    const auto* w = reinterpret_cast<const Block*>(wr);
    const int64_t nb = n / quant::kQK, ng = nb / kGroup;
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t gi = 0; gi < ng; ++gi) {
      const Block* wb = w + gi * kGroup;
      if (prefetch) prefetch_ahead(wb, kGroup * sizeof(Block));
      __m256i q[kGroup], aq[kGroup];
      for (int k = 0; k < kGroup; ++k) {
        q[k] = WF::weights(wb[k]);
        aq[k] = _mm256_sign_epi8(q[k], q[k]);
      }
      const __m128 dw = block_scales4(wb);
      for (int t = 0; t < T; ++t) {
        const auto* y = reinterpret_cast<const GroupQ8_0*>(x + t * xs) + gi;
        __m256i s[kGroup];
        for (int k = 0; k < kGroup; ++k) {
          const __m256i ys = _mm256_sign_epi8(load256(y->qs + quant::kQK * k), q[k]);
          s[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(aq[k], ys), ones);
        }
        const __m128 sc = _mm_mul_ps(dw, load_halves4(y->d));
        acc[t] = _mm256_fmadd_ps(group_sums(s), _mm256_set_m128(sc, sc), acc[t]);
      }
    }
    for (int64_t i = ng * kGroup; i < nb; ++i) {  // the row's ungrouped last blocks
      const __m256i q = WF::weights(w[i]);
      const __m256i aq = _mm256_sign_epi8(q, q);
      const float dw = block_scale(w[i]);
      for (int t = 0; t < T; ++t) {
        const auto* y = reinterpret_cast<const BlockQ8_0*>(
                            reinterpret_cast<const GroupQ8_0*>(x + t * xs) + ng) +
                        (i - ng * kGroup);
        const __m256i ys = _mm256_sign_epi8(load256(y->qs), q);
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, ys), ones);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * h2f(y->d)), acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) out[t] = hsum256(acc[t]);
  }
};

// Unsigned weights with a minimum (Q4_1, Q5_1) against grouped Q8_1 activations.
template <class WF>
struct LegacyMin {
  template <int T>
  static void dot(int64_t n, const uint8_t* wr, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    using Block = typename WF::Block;
    const auto* w = reinterpret_cast<const Block*>(wr);
    const int64_t nb = n / quant::kQK, ng = nb / kGroup;
    __m256 acc[T];
    __m128 accm[T];
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_setzero_ps();
      accm[t] = _mm_setzero_ps();
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t gi = 0; gi < ng; ++gi) {
      const Block* wb = w + gi * kGroup;
      if (prefetch) prefetch_ahead(wb, kGroup * sizeof(Block));
      __m256i q[kGroup];
      for (int k = 0; k < kGroup; ++k) q[k] = WF::weights(wb[k]);
      const __m128 dw = four_halves<Block, &Block::d>(wb), mw = four_halves<Block, &Block::m>(wb);
      for (int t = 0; t < T; ++t) {
        const auto* y = reinterpret_cast<const GroupQ8_1*>(x + t * xs) + gi;
        __m256i s[kGroup];
        for (int k = 0; k < kGroup; ++k) {
          s[k] =
              _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], load256(y->qs + quant::kQK * k)), ones);
        }
        const __m128 sc = _mm_mul_ps(dw, load_halves4(y->d));
        acc[t] = _mm256_fmadd_ps(group_sums(s), _mm256_set_m128(sc, sc), acc[t]);
        accm[t] = _mm_fmadd_ps(mw, load_halves4(y->s), accm[t]);
      }
    }
    float tail_m[T] = {};
    for (int64_t i = ng * kGroup; i < nb; ++i) {  // the row's ungrouped last blocks
      const __m256i q = WF::weights(w[i]);
      const float dw = h2f(w[i].d), mw = h2f(w[i].m);
      for (int t = 0; t < T; ++t) {
        const auto* y = reinterpret_cast<const BlockQ8_1*>(
                            reinterpret_cast<const GroupQ8_1*>(x + t * xs) + ng) +
                        (i - ng * kGroup);
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(q, load256(y->qs)), ones);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * h2f(y->d)), acc[t]);
        tail_m[t] += mw * h2f(y->s);
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m128 m2 = _mm_add_ps(accm[t], _mm_movehl_ps(accm[t], accm[t]));
      out[t] = hsum256(acc[t]) + (_mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2))) + tail_m[t]);
    }
  }
};

// ---- float weights ----

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m256 load(const uint8_t* w, int64_t i) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i);
  }
  static float one(const uint8_t* w, int64_t i) { return reinterpret_cast<const float*>(w)[i]; }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const uint8_t* w, int64_t i) { return _mm256_cvtph_ps(load128(w + 2 * i)); }
  static float one(const uint8_t* w, int64_t i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    return _cvtsh_ss(h);
  }
};
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const uint8_t* w, int64_t i) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(w + 2 * i)), 16));
  }
  static float one(const uint8_t* w, int64_t i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <class L>
struct FloatDot {
  template <int T>
  static void dot(int64_t n, const uint8_t* w, const uint8_t* x, size_t xs, float* out,
                  bool prefetch) {
    const float* y[T];
    for (int t = 0; t < T; ++t) y[t] = reinterpret_cast<const float*>(x + t * xs);
    __m256 a0[T], a1[T];
    float tail[T];
    for (int t = 0; t < T; ++t) {
      a0[t] = a1[t] = _mm256_setzero_ps();
      tail[t] = 0.0f;
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      if (prefetch) prefetch_ahead(w + i * L::kBytes, 16 * L::kBytes);
      const __m256 w0 = L::load(w, i), w1 = L::load(w, i + 8);
      for (int t = 0; t < T; ++t) {
        a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y[t] + i), a0[t]);
        a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y[t] + i + 8), a1[t]);
      }
    }
    for (; i + 8 <= n; i += 8) {
      const __m256 w0 = L::load(w, i);
      for (int t = 0; t < T; ++t) a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y[t] + i), a0[t]);
    }
    for (; i < n; ++i) {
      const float wi = L::one(w, i);
      for (int t = 0; t < T; ++t) tail[t] += wi * y[t][i];
    }
    for (int t = 0; t < T; ++t) out[t] = hsum256(_mm256_add_ps(a0[t], a1[t])) + tail[t];
  }
};

}  // namespace

void fill_avx2_kernels(KernelTable* table) {
  auto set = [&](gguf::GgmlType type, TileFn fn) { table->tile[static_cast<int>(type)] = fn; };
  set(gguf::GgmlType::F32, tile_of<FloatDot<LoadF32>>);
  set(gguf::GgmlType::F16, tile_of<FloatDot<LoadF16>>);
  set(gguf::GgmlType::BF16, tile_of<FloatDot<LoadBF16>>);
  set(gguf::GgmlType::Q8_0, tile_of<LegacySigned<WQ8_0>, 8>);
  set(gguf::GgmlType::Q4_0, tile_of<LegacySigned<WQ4_0>, 8>);
  set(gguf::GgmlType::Q5_0, tile_of<LegacySigned<WQ5_0>, 8>);
  set(gguf::GgmlType::MXFP4, tile_of<LegacySigned<WMXFP4>, 8>);
  set(gguf::GgmlType::Q4_1, tile_of<LegacyMin<WQ4_1>, 8>);
  set(gguf::GgmlType::Q5_1, tile_of<LegacyMin<WQ5_1>, 8>);
  // The legacy kernels read their grouped activation layout (see GroupQ8_0).
  auto act = [&](gguf::GgmlType type, QuantizeActFn fn) {
    table->quantize_act[static_cast<int>(type)] = fn;
  };
  for (gguf::GgmlType type :
       {gguf::GgmlType::Q8_0, gguf::GgmlType::Q4_0, gguf::GgmlType::Q5_0, gguf::GgmlType::MXFP4}) {
    act(type, quantize_grouped<false>);
  }
  for (gguf::GgmlType type : {gguf::GgmlType::Q4_1, gguf::GgmlType::Q5_1})
    act(type, quantize_grouped<true>);
  set(gguf::GgmlType::Q2_K, tile_of<Q2K, 8>);
  set(gguf::GgmlType::Q3_K, tile_of<Q3K, 8>);
  set(gguf::GgmlType::Q4_K, tile_of<QK4<false>, 8>);
  set(gguf::GgmlType::Q5_K, tile_of<QK4<true>, 8>);
  set(gguf::GgmlType::Q6_K, tile_of<Q6K, 8>);
}

}  // namespace hypura::compute
