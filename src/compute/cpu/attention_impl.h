// The CPU attention step (see kernels_avx2_attention.cc for the method), compiled once per
// instruction set: kernels_avx2_attention.cc with the AVX2 flags, kernels_avx512_attention.cc
// with the AVX-512 ones, written once over a vector of 8 or 16 floats (VecF). Both levels
// do the same FMAs in the same order, so their scores and value sums agree bit for bit.
// Everything stays in an anonymous namespace (tile_common.h says why).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "compute/cpu/kernels.h"
#include "compute/cpu/simd_common.h"

namespace hypura::compute {
namespace {

// One vector of floats: 16 under AVX-512, 8 under AVX2. The step's products are written
// once over it.
#if defined(__AVX512F__)
using VecF = __m512;
constexpr int kW = 16;
constexpr int kScoreVecs = 4;  // key vectors a score pass holds per row (64 keys)
constexpr int kValueVecs = 4;  // value vectors a pass holds per row
inline VecF vzero() {
  return _mm512_setzero_ps();
}
inline VecF vset1(float x) {
  return _mm512_set1_ps(x);
}
inline VecF vload(const float* p) {
  return _mm512_loadu_ps(p);
}
inline void vstore(float* p, VecF v) {
  _mm512_storeu_ps(p, v);
}
inline VecF vfma(VecF a, VecF b, VecF c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline VecF vmul(VecF a, VecF b) {
  return _mm512_mul_ps(a, b);
}
// The first n <= kW floats (a value row's last, partial vector; the rest read as 0).
inline VecF vload_n(const float* p, int n) {
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
}
inline void vstore_n(float* p, VecF v, int n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
}
// kW halves widened (exact), or the first n of them.
inline VecF vload_h(const uint16_t* p) {
  return _mm512_cvtph_ps(load256(p));
}
inline VecF vload_h_n(const uint16_t* p, int n) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1), p));
}
#else
using VecF = __m256;
constexpr int kW = 8;
constexpr int kScoreVecs = 2;  // 16 registers: 4 rows x 2 key vectors, their loads, a broadcast
constexpr int kValueVecs = 2;
inline VecF vzero() {
  return _mm256_setzero_ps();
}
inline VecF vset1(float x) {
  return _mm256_set1_ps(x);
}
inline VecF vload(const float* p) {
  return _mm256_loadu_ps(p);
}
inline void vstore(float* p, VecF v) {
  _mm256_storeu_ps(p, v);
}
inline VecF vfma(VecF a, VecF b, VecF c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline VecF vmul(VecF a, VecF b) {
  return _mm256_mul_ps(a, b);
}
// Value rows are whole vectors here (head_dim_v % 8 == 0).
inline VecF vload_n(const float* p, int) {
  return _mm256_loadu_ps(p);
}
inline void vstore_n(float* p, VecF v, int) {
  _mm256_storeu_ps(p, v);
}
inline VecF vload_h(const uint16_t* p) {
  return _mm256_cvtph_ps(load128(p));
}
inline VecF vload_h_n(const uint16_t* p, int) {
  return vload_h(p);
}
#endif

constexpr int kTileRows = static_cast<int>(kAttnTileRows);

// e^x for x <= 0 (inputs below -87.3 return ~1e-38, which the sums cannot see).
inline __m256 exp_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2, with ln2 split in two so that r is exact to float precision.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// gate = silu(gate) * up, 8 lanes at a time (then the scalar twin for the tail). With
// e = e^-|x| (never above 1, so it cannot overflow): sigmoid(x) = 1 / (1 + e) for x >= 0
// and e / (1 + e) below; about 2 ulp from the scalar twin's std::exp, at a fraction of its
// cost.
inline void silu_mul_simd(float* gate, const float* up, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 e = exp_nonpositive(_mm256_or_ps(x, sign));  // e^-|x|
    const __m256 num = _mm256_blendv_ps(one, e, x);           // x's sign bit picks e
    const __m256 sig = _mm256_div_ps(num, _mm256_add_ps(one, e));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_mul_ps(x, sig), _mm256_loadu_ps(up + i)));
  }
  ref::silu_mul(gate + i, up + i, n - i);
}

// gate = gelu_tanh_fp16(gate) * up, 8 lanes at a time (then the scalar twin for the tail):
// the input rounded to fp16 by F16C (to nearest even, as quant::f32_to_fp16), its table
// entry gathered, the lanes at or below -10 set to 0 and those from 10 up (or NaN) kept.
inline void gelu_mul_simd(float* gate, const float* up, int64_t n) {
  const float* table = gelu_fp16_table();
  const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const __m256 looked_up = _mm256_i32gather_ps(table, h, 4);
    const __m256 in_table =
        _mm256_and_ps(_mm256_cmp_ps(x, lo, _CMP_GT_OQ), _mm256_cmp_ps(x, hi, _CMP_LT_OQ));
    const __m256 high = _mm256_cmp_ps(x, lo, _CMP_NLE_UQ);  // > -10 or NaN: keep x unless in table
    const __m256 g = _mm256_blendv_ps(_mm256_and_ps(x, high), looked_up, in_table);
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
  }
  ref::gelu_mul(gate + i, up + i, n - i);
}

// The same fold as the scalar twin: ((0+4) + (1+5)) + ((2+6) + (3+7)).
inline float fold_lanes(__m256 v) {
  const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_hadd_ps(a, a);  // (0+4)+(1+5), (2+6)+(3+7), ...
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// Scores of R rows against the NC key vectors at kt (key j's element c at
// kt[c * kAttnMaxKeys + j]): s[r][j] = q[r][0] k_j[0] + ... + q[r][d-1] k_j[d-1], one FMA
// chain per score in ascending c, so a score is the same whatever rows share its tile.
template <int R, int NC>
inline void score_tile(const float* const* q, int64_t d, const float* kt, float* s) {
  VecF acc[R][NC];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < NC; ++i) acc[r][i] = vzero();
  }
  for (int64_t c = 0; c < d; ++c) {
    const float* kc = kt + c * kAttnMaxKeys;
    VecF k[NC];
    for (int i = 0; i < NC; ++i) k[i] = vload(kc + i * kW);
    for (int r = 0; r < R; ++r) {
      const VecF qc = vset1(q[r][c]);
      for (int i = 0; i < NC; ++i) acc[r][i] = vfma(qc, k[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < NC; ++i) vstore(s + r * kAttnMaxKeys + i * kW, acc[r][i]);
  }
}

// Scores of R rows for keys [k0, k1) (whole vectors), kScoreVecs vectors a pass.
template <int R>
inline void score_rows(const float* const* q, int64_t d, const float* kt, float* s, int32_t k0,
                       int32_t k1) {
  for (int32_t k = k0; k < k1; k += kScoreVecs * kW) {
    const int n = std::min<int32_t>(kScoreVecs, (k1 - k) / kW);
    if (n == kScoreVecs) {
      score_tile<R, kScoreVecs>(q, d, kt + k, s + k);
    } else if (n == 1) {
      score_tile<R, 1>(q, d, kt + k, s + k);
    } else if constexpr (kScoreVecs > 2) {
      if (n == 2) {
        score_tile<R, 2>(q, d, kt + k, s + k);
      } else {
        score_tile<R, 3>(q, d, kt + k, s + k);
      }
    }
  }
}

// acc[r][0..width) = acc[r] * shrink[r] + sum_{j in [j0, j1)} e[r][j] v_j (j ascending), for
// width = NV vectors (with kPartial, the last one n_last floats); the values are T (float,
// or F16 widened on the fly: exact, so the same sums). A key outside row r's range has
// e[r][j] == 0, which adds an exact zero: each element gets the FMAs of its own keys in
// their order, whatever rows share the tile (acc is never -0, so + 0 leaves it as it is).
template <int R, int NV, bool kPartial, class T>
inline void value_tile(float* const* acc, const float* shrink, const float* e, const T* values,
                       int64_t stride, int32_t j0, int32_t j1, int n_last) {
  // Masked loads only where needed: GCC keeps the accumulators on the stack around them.
  auto load_acc = [&](const float* p, int i) {
    return kPartial && i == NV - 1 ? vload_n(p, n_last) : vload(p);
  };
  auto load_value = [&](const T* p, int i) {
    if constexpr (std::is_same_v<T, uint16_t>) {
      return kPartial && i == NV - 1 ? vload_h_n(p, n_last) : vload_h(p);
    } else {
      return load_acc(p, i);
    }
  };
  VecF a[R * NV];
  for (int r = 0; r < R; ++r) {
    const VecF sr = vset1(shrink[r]);  // 1 where nothing rescales: x * 1 == x
    for (int i = 0; i < NV; ++i) a[r * NV + i] = vmul(load_acc(acc[r] + i * kW, i), sr);
  }
  for (int32_t j = j0; j < j1; ++j) {
    const T* vj = values + j * stride;
    VecF v[NV];
    for (int i = 0; i < NV; ++i) v[i] = load_value(vj + i * kW, i);
    for (int r = 0; r < R; ++r) {
      const VecF er = vset1(e[r * kAttnMaxKeys + j]);
      for (int i = 0; i < NV; ++i) a[r * NV + i] = vfma(er, v[i], a[r * NV + i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < NV; ++i) {
      if (kPartial && i == NV - 1) {
        vstore_n(acc[r] + i * kW, a[r * NV + i], n_last);
      } else {
        vstore(acc[r] + i * kW, a[r * NV + i]);
      }
    }
  }
}

// The value sums of R rows over keys [j0, j1), kValueVecs vectors of columns a pass.
template <int R, class T>
inline void value_rows(float* const* acc_rows, const float* shrink, const float* e, const T* values,
                       int64_t stride, int64_t dv, int32_t j0, int32_t j1) {
  float* acc[R];
  for (int64_t c = 0; c < dv; c += kValueVecs * kW) {
    const int64_t width = std::min<int64_t>(kValueVecs * kW, dv - c);
    const int whole = static_cast<int>(width / kW), part = static_cast<int>(width % kW);
    for (int r = 0; r < R; ++r) acc[r] = acc_rows[r] + c;
    const T* v = values + c;
    switch (whole) {
      case 1:
        value_tile<R, 1, false>(acc, shrink, e, v, stride, j0, j1, kW);
        break;
      case 2:
        value_tile<R, 2, false>(acc, shrink, e, v, stride, j0, j1, kW);
        break;
#if defined(__AVX512F__)
      case 3:
        value_tile<R, 3, false>(acc, shrink, e, v, stride, j0, j1, kW);
        break;
      case 4:
        value_tile<R, 4, false>(acc, shrink, e, v, stride, j0, j1, kW);
        break;
#endif
    }
    if (part > 0) {  // AVX-512 only (dv % 8 == 0): a last vector of 8
      for (int r = 0; r < R; ++r) acc[r] += whole * kW;
      value_tile<R, 1, true>(acc, shrink, e, v + whole * kW, stride, j0, j1, part);
    }
  }
}

// Lanes of positions g..g+7 inside [lo, hi).
inline __m256 visible(int32_t g, int32_t lo, int32_t hi) {
  const __m256i j =
      _mm256_add_epi32(_mm256_set1_epi32(g), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i ge_lo = _mm256_cmpgt_epi32(j, _mm256_set1_epi32(lo - 1));
  const __m256i lt_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), j);
  return _mm256_castsi256_ps(_mm256_and_si256(ge_lo, lt_hi));
}

// Row r's softmax step over its raw scores s[lo, hi): scaled and masked, the running
// maximum, the rescale of what was summed, then the exps in place of the scores (masked
// keys 0) over the 8-key groups covering the range. Returns the factor the row's
// accumulator takes (1: no rescale).
inline float row_exps(const AttentionRows& rows, int64_t r, float* s) {
  const int32_t lo = rows.lo[r], hi = rows.hi[r], g0 = lo & ~7, g1 = (hi + 7) & ~7;
  const __m256 scale = _mm256_set1_ps(rows.scale), neg_inf = _mm256_set1_ps(-INFINITY);
  __m256 vmax = neg_inf;
  for (int32_t g = g0; g < g1; g += 8) {
    // Lanes past the block's keys scored stale scratch columns (finite) and are masked.
    const __m256 sc = _mm256_mul_ps(_mm256_load_ps(s + g), scale);
    const __m256 masked = _mm256_blendv_ps(neg_inf, sc, visible(g, lo, hi));
    _mm256_store_ps(s + g, masked);
    vmax = _mm256_max_ps(vmax, masked);
  }
  const float m_old = rows.m[r];
  const float m_new = std::fmax(m_old, hmax256(vmax));
  const bool rescale = rows.l[r] > 0 && m_new > m_old;
  const float shrink = rescale ? std::exp(m_old - m_new) : 1.0f;
  if (rescale) rows.l[r] *= shrink;
  rows.m[r] = m_new;
  const __m256 mv = _mm256_set1_ps(m_new);
  __m256 lane = _mm256_setzero_ps();
  for (int32_t g = g0; g < g1; g += 8) {
    const __m256 x = _mm256_load_ps(s + g);
    const __m256 e = _mm256_and_ps(exp_nonpositive(_mm256_sub_ps(x, mv)),
                                   _mm256_cmp_ps(x, neg_inf, _CMP_NEQ_OQ));
    _mm256_store_ps(s + g, e);
    lane = _mm256_add_ps(lane, e);
  }
  rows.l[r] += fold_lanes(lane);
  return shrink;
}

// Rows r0..r0+R-1 of the step: their scores over the union of their key ranges, each
// row's softmax step, then their value sums (a key outside a row's range weighs 0).
template <int R>
void attend_tile(const AttentionRows& rows, int64_t r0, const float* keys_t, const KvRows& values,
                 float* s) {
  int32_t lo = kAttnMaxKeys, hi = 0;
  for (int r = 0; r < R; ++r) {
    if (rows.lo[r0 + r] >= rows.hi[r0 + r]) continue;
    lo = std::min(lo, rows.lo[r0 + r]);
    hi = std::max(hi, rows.hi[r0 + r]);
  }
  if (lo >= hi) return;
  const float* q[R];
  for (int r = 0; r < R; ++r) q[r] = rows.q[r0 + r];
  score_rows<R>(q, rows.head_dim, keys_t, s, lo / kW * kW, (hi + kW - 1) / kW * kW);
  float shrink[R];
  float* acc[R];
  for (int r = 0; r < R; ++r) {
    float* sr = s + r * kAttnMaxKeys;
    const int32_t rlo = rows.lo[r0 + r], rhi = rows.hi[r0 + r];
    acc[r] = rows.acc + (r0 + r) * rows.head_dim_v;
    shrink[r] = rlo < rhi ? row_exps(rows, r0 + r, sr) : 1.0f;
    // Weights 0 for the tile's keys outside the row's 8-key groups.
    const int32_t g0 = rlo < rhi ? rlo & ~7 : hi, g1 = rlo < rhi ? (rhi + 7) & ~7 : hi;
    std::fill(sr + lo, sr + std::max(lo, g0), 0.0f);
    std::fill(sr + std::min(hi, g1), sr + hi, 0.0f);
  }
  if (values.f16) {
    value_rows<R>(acc, shrink, s, static_cast<const uint16_t*>(values.data), values.stride,
                  rows.head_dim_v, lo, hi);
  } else {
    value_rows<R>(acc, shrink, s, static_cast<const float*>(values.data), values.stride,
                  rows.head_dim_v, lo, hi);
  }
}

void attention_step_simd(const AttentionRows& rows, const float* keys_t, const KvRows& values,
                         int64_t n_keys) {
  if (rows.head_dim_v % 8 != 0) {
    ref::attention_step(rows, keys_t, values, n_keys);
    return;
  }
  alignas(64) float s[kTileRows * kAttnMaxKeys];
  int64_t r0 = 0;
  for (; r0 + kTileRows <= rows.n_rows; r0 += kTileRows) {
    attend_tile<kTileRows>(rows, r0, keys_t, values, s);
  }
  switch (rows.n_rows - r0) {
    case 1:
      return attend_tile<1>(rows, r0, keys_t, values, s);
    case 2:
      return attend_tile<2>(rows, r0, keys_t, values, s);
    case 3:
      return attend_tile<3>(rows, r0, keys_t, values, s);
  }
}

void widen_rows_simd(const KvRows& src, int64_t n_rows, int64_t width, float* out) {
  if (!src.f16) {
    ref::widen_rows(src, n_rows, width, out);
    return;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint16_t* in = static_cast<const uint16_t*>(src.data) + r * src.stride;
    float* o = out + r * width;
    int64_t c = 0;
    for (; c + 8 <= width; c += 8) {
      _mm256_storeu_ps(o + c,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c))));
    }
    for (; c < width; ++c) o[c] = _cvtsh_ss(in[c]);
  }
}

// The unpacks of 16-, 32- and 64-bit elements within 128-bit lanes, by register width.
#define HYPURA_UNPACKS(V, P)         \
  inline V lo16(V a, V b) {          \
    return P##_unpacklo_epi16(a, b); \
  }                                  \
  inline V hi16(V a, V b) {          \
    return P##_unpackhi_epi16(a, b); \
  }                                  \
  inline V lo32(V a, V b) {          \
    return P##_unpacklo_epi32(a, b); \
  }                                  \
  inline V hi32(V a, V b) {          \
    return P##_unpackhi_epi32(a, b); \
  }                                  \
  inline V lo64(V a, V b) {          \
    return P##_unpacklo_epi64(a, b); \
  }                                  \
  inline V hi64(V a, V b) {          \
    return P##_unpackhi_epi64(a, b); \
  }
HYPURA_UNPACKS(__m128i, _mm)
#if defined(__AVX512F__)
HYPURA_UNPACKS(__m512i, _mm512)
#endif
#undef HYPURA_UNPACKS

// Eight rows of eight halves transposed (t[i] = element i of every row) in every 128-bit
// lane of V.
template <class V>
inline void transpose8x8_epi16(V* t) {
  V a[8], b[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = lo16(t[2 * i], t[2 * i + 1]);
    a[2 * i + 1] = hi16(t[2 * i], t[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    for (int h = 0; h < 2; ++h) {
      b[4 * i + 2 * h] = lo32(a[4 * i + h], a[4 * i + h + 2]);
      b[4 * i + 2 * h + 1] = hi32(a[4 * i + h], a[4 * i + h + 2]);
    }
  }
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = lo64(b[i], b[i + 4]);
    t[2 * i + 1] = hi64(b[i], b[i + 4]);
  }
}

// Keys j..j+7, elements c..c+7: one 8x8 transpose of halves, then each element's eight
// keys widened with one conversion.
inline void widen_keys_8x8(const uint16_t* in, int64_t stride, float* out) {
  __m128i t[8];
  for (int i = 0; i < 8; ++i) t[i] = load128(in + i * stride);
  transpose8x8_epi16(t);
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(out + i * kAttnMaxKeys, _mm256_cvtph_ps(t[i]));
}

#if defined(__AVX512F__)
// Keys j..j+7, elements c..c+31: four 8x8 transposes side by side in the 128-bit lanes
// (lane L of t[i] holds element 8L + i), half the shuffles per element of widen_keys_8x8.
inline void widen_keys_8x32(const uint16_t* in, int64_t stride, float* out) {
  __m512i t[8];
  for (int i = 0; i < 8; ++i) t[i] = _mm512_loadu_si512(in + i * stride);
  transpose8x8_epi16(t);
  for (int i = 0; i < 8; ++i) {
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(t[i]));        // lanes 0, 1
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(t[i], 1));  // lanes 2, 3
    _mm256_storeu_ps(out + i * kAttnMaxKeys, _mm512_castps512_ps256(lo));
    _mm256_storeu_ps(out + (8 + i) * kAttnMaxKeys, _mm512_extractf32x8_ps(lo, 1));
    _mm256_storeu_ps(out + (16 + i) * kAttnMaxKeys, _mm512_castps512_ps256(hi));
    _mm256_storeu_ps(out + (24 + i) * kAttnMaxKeys, _mm512_extractf32x8_ps(hi, 1));
  }
}
#endif

// Keys widened and transposed: out[c * kAttnMaxKeys + j] = key j's element c. Groups of
// eight keys are transposed as halves and then widened (a conversion writes one element
// of eight keys); a last group of fewer keys goes through the twin.
void widen_keys_simd(const KvRows& src, int64_t n_keys, int64_t d, float* out) {
  if (!src.f16 || d % 8 != 0) {
    ref::widen_keys(src, n_keys, d, out);
    return;
  }
  const uint16_t* in = static_cast<const uint16_t*>(src.data);
  const int64_t whole = n_keys & ~7;
  for (int64_t j = 0; j < whole; j += 8) {
    int64_t c = 0;
#if defined(__AVX512F__)
    for (; c + 32 <= d; c += 32)
      widen_keys_8x32(in + j * src.stride + c, src.stride, out + c * kAttnMaxKeys + j);
#endif
    for (; c < d; c += 8)
      widen_keys_8x8(in + j * src.stride + c, src.stride, out + c * kAttnMaxKeys + j);
  }
  if (whole < n_keys) {
    const KvRows rest{in + whole * src.stride, src.stride, true};
    ref::widen_keys(rest, n_keys - whole, d, out + whole);
  }
}

}  // namespace
}  // namespace hypura::compute
