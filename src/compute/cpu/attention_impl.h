// The CPU attention step (see kernels_avx2_attention.cc for the method), compiled once per
// instruction set: kernels_avx2_attention.cc with the AVX2 flags, kernels_avx512_attention.cc
// with the AVX-512 ones. Under AVX-512 the two hot loops take 16 floats per instruction:
// the scores' dot products (16-float chunks of the head, folded to 8 lanes before the same
// horizontal-add tree) and the value accumulation (the same FMAs per element, in the same
// key order, so its results equal the AVX2 ones bit for bit). Everything stays in an
// anonymous namespace (tile_common.h says why).
#pragma once

#include <immintrin.h>

#include <cmath>

#include "compute/cpu/kernels.h"
#include "compute/cpu/simd_common.h"

namespace hypura::compute {
namespace {

#if defined(__AVX512F__)
constexpr int kDvChunk = 128;  // accumulator floats kept in registers per pass (8 zmm)
#else
constexpr int kDvChunk = 64;  // accumulator floats kept in registers per pass (8 ymm)
#endif

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

// The same fold as the scalar twin: ((0+4) + (1+5)) + ((2+6) + (3+7)).
inline float fold_lanes(__m256 v) {
  const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_hadd_ps(a, a);  // (0+4)+(1+5), (2+6)+(3+7), ...
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// Scores of keys j0..j0+7 (rows of d floats) against q: one vector.
inline __m256 scores8(const float* q, const float* keys, int64_t d) {
  __m256 a[8];
#if defined(__AVX512F__)
  // 16-float chunks, then each key's two halves added, then any last 8 floats.
  __m512 w[8];
  for (int k = 0; k < 8; ++k) w[k] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= d; c += 16) {
    const __m512 qv = _mm512_loadu_ps(q + c);
    for (int k = 0; k < 8; ++k) w[k] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(keys + k * d + c), w[k]);
  }
  for (int k = 0; k < 8; ++k) {
    a[k] = _mm256_add_ps(_mm512_castps512_ps256(w[k]),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w[k]), 1)));
  }
  if (c < d) {  // d % 16 == 8
    const __m256 qv = _mm256_loadu_ps(q + c);
    for (int k = 0; k < 8; ++k) a[k] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys + k * d + c), a[k]);
  }
#else
  for (int k = 0; k < 8; ++k) a[k] = _mm256_setzero_ps();
  for (int64_t c = 0; c < d; c += 8) {
    const __m256 qv = _mm256_loadu_ps(q + c);
    for (int k = 0; k < 8; ++k) a[k] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys + k * d + c), a[k]);
  }
#endif
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Lanes of positions g..g+7 inside [lo, hi).
inline __m256 visible(int32_t g, int32_t lo, int32_t hi) {
  const __m256i j =
      _mm256_add_epi32(_mm256_set1_epi32(g), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i ge_lo = _mm256_cmpgt_epi32(j, _mm256_set1_epi32(lo - 1));
  const __m256i lt_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), j);
  return _mm256_castsi256_ps(_mm256_and_si256(ge_lo, lt_hi));
}

#if defined(__AVX512F__)
// acc[0..16N + 8H) = acc * shrink + sum_{j in [lo, hi)} e[j] * v_j[...]: N zmm and H (0 or 1)
// ymm accumulators, the same per-element FMAs in the same key order as the AVX2 build.
template <int N, int H>
inline void accumulate_values_n(float* acc, const float* e, const float* values, int64_t dv,
                                int32_t lo, int32_t hi, float shrink, bool rescale) {
  __m512 a[N > 0 ? N : 1];
  __m256 b = _mm256_setzero_ps();
  for (int i = 0; i < N; ++i) a[i] = _mm512_loadu_ps(acc + 16 * i);
  if constexpr (H == 1) b = _mm256_loadu_ps(acc + 16 * N);
  if (rescale) {
    for (int i = 0; i < N; ++i) a[i] = _mm512_mul_ps(a[i], _mm512_set1_ps(shrink));
    if constexpr (H == 1) b = _mm256_mul_ps(b, _mm256_set1_ps(shrink));
  }
  for (int32_t j = lo; j < hi; ++j) {
    const __m512 ej = _mm512_set1_ps(e[j]);
    const float* vj = values + j * dv;
    for (int i = 0; i < N; ++i) a[i] = _mm512_fmadd_ps(ej, _mm512_loadu_ps(vj + 16 * i), a[i]);
    if constexpr (H == 1)
      b = _mm256_fmadd_ps(_mm512_castps512_ps256(ej), _mm256_loadu_ps(vj + 16 * N), b);
  }
  for (int i = 0; i < N; ++i) _mm512_storeu_ps(acc + 16 * i, a[i]);
  if constexpr (H == 1) _mm256_storeu_ps(acc + 16 * N, b);
}

#else
// acc[0..8N) = acc * shrink + sum_{j in [lo, hi)} e[j] * v_j[0..8N). N is a template
// parameter so that the N accumulators live in registers: with a run-time count GCC kept
// them in a stack array and every FMA waited on a store-to-load round trip (the tile ran
// at 23 GFLOP/s on a Zen 3 core, 37 with this; bench/kernels_bench.cc attention_tile).
template <int N>
inline void accumulate_values_n(float* acc, const float* e, const float* values, int64_t dv,
                                int32_t lo, int32_t hi, float shrink, bool rescale) {
  __m256 a[N];
  for (int i = 0; i < N; ++i) a[i] = _mm256_loadu_ps(acc + 8 * i);
  if (rescale) {
    const __m256 s = _mm256_set1_ps(shrink);
    for (int i = 0; i < N; ++i) a[i] = _mm256_mul_ps(a[i], s);
  }
  for (int32_t j = lo; j < hi; ++j) {
    const __m256 ej = _mm256_broadcast_ss(e + j);
    const float* vj = values + j * dv;
    for (int i = 0; i < N; ++i) a[i] = _mm256_fmadd_ps(ej, _mm256_loadu_ps(vj + 8 * i), a[i]);
  }
  for (int i = 0; i < N; ++i) _mm256_storeu_ps(acc + 8 * i, a[i]);
}

#endif

// acc[0..width) as above, width = 8n floats (n <= kDvChunk / 8) in registers.
template <int n>
inline void accumulate_chunk(float* acc, const float* e, const float* values, int64_t dv,
                             int32_t lo, int32_t hi, float shrink, bool rescale) {
#if defined(__AVX512F__)
  accumulate_values_n<n / 2, n % 2>(acc, e, values, dv, lo, hi, shrink, rescale);
#else
  if constexpr (n <= 8) accumulate_values_n<n>(acc, e, values, dv, lo, hi, shrink, rescale);
#endif
}

inline void accumulate_values(float* acc, const float* e, const float* values, int64_t dv,
                              int64_t width, int32_t lo, int32_t hi, float shrink, bool rescale) {
  switch (width / 8) {
#define HYPURA_ACC_CASE(n) \
  case n:                  \
    return accumulate_chunk<n>(acc, e, values, dv, lo, hi, shrink, rescale);
    HYPURA_ACC_CASE(1)
    HYPURA_ACC_CASE(2)
    HYPURA_ACC_CASE(3)
    HYPURA_ACC_CASE(4)
    HYPURA_ACC_CASE(5)
    HYPURA_ACC_CASE(6)
    HYPURA_ACC_CASE(7)
    HYPURA_ACC_CASE(8)
    HYPURA_ACC_CASE(9)
    HYPURA_ACC_CASE(10)
    HYPURA_ACC_CASE(11)
    HYPURA_ACC_CASE(12)
    HYPURA_ACC_CASE(13)
    HYPURA_ACC_CASE(14)
    HYPURA_ACC_CASE(15)
    HYPURA_ACC_CASE(16)
#undef HYPURA_ACC_CASE
  }
}

// A row's share of the block: its query, its visible keys [lo, hi) and their scratch.
struct RowStep {
  const float* q;
  int32_t lo, hi;
  int32_t g0, g1;  // the 8-key groups covering [lo, hi)
  float* s;        // (kAttnMaxKeys) its scores, then its exps
};

RowStep row_step(const AttentionRows& rows, int64_t r, float* s) {
  const int32_t lo = rows.lo[r], hi = rows.hi[r];
  return RowStep{rows.q[r], lo, hi, lo & ~7, (hi + 7) & ~7, s};
}

// Scores of one group for one row, masked, stored; returns them for the running maximum.
inline __m256 store_scores(const RowStep& row, int32_t g, __m256 raw, __m256 scale) {
  const __m256 sc = _mm256_mul_ps(raw, scale);
  const __m256 masked = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sc, visible(g, row.lo, row.hi));
  _mm256_store_ps(row.s + g, masked);
  return masked;
}

// Steps 2-3 of a row after its scores: the new maximum, the rescale, the exps in place
// and their lane sum. Returns the lane sum; *shrink, *rescale for accumulate_values.
inline __m256 exps(const AttentionRows& rows, int64_t r, const RowStep& row, __m256 vmax,
                   float* shrink, bool* rescale) {
  const float m_old = rows.m[r];
  const float m_new = std::fmax(m_old, hmax256(vmax));
  *rescale = rows.l[r] > 0 && m_new > m_old;
  *shrink = *rescale ? std::exp(m_old - m_new) : 1.0f;
  if (*rescale) rows.l[r] *= *shrink;
  rows.m[r] = m_new;
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY), mv = _mm256_set1_ps(m_new);
  __m256 lane = _mm256_setzero_ps();
  for (int32_t g = row.g0; g < row.g1; g += 8) {
    const __m256 x = _mm256_load_ps(row.s + g);
    const __m256 e = _mm256_and_ps(exp_nonpositive(_mm256_sub_ps(x, mv)),
                                   _mm256_cmp_ps(x, neg_inf, _CMP_NEQ_OQ));
    _mm256_store_ps(row.s + g, e);
    lane = _mm256_add_ps(lane, e);
  }
  return lane;
}

void attend_row(const AttentionRows& rows, int64_t r, const float* keys, const float* values,
                float* s) {
  const int64_t d = rows.head_dim, dv = rows.head_dim_v;
  const RowStep row = row_step(rows, r, s);
  const __m256 scale = _mm256_set1_ps(rows.scale);
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int32_t g = row.g0; g < row.g1; g += 8) {
    // Lanes past n_keys read stale scratch rows (finite) and are masked out.
    vmax = _mm256_max_ps(vmax, store_scores(row, g, scores8(row.q, keys + g * d, d), scale));
  }
  float shrink;
  bool rescale;
  const __m256 lane = exps(rows, r, row, vmax, &shrink, &rescale);
  float* acc = rows.acc + r * dv;
  for (int64_t c = 0; c < dv; c += kDvChunk) {
    const int64_t width = dv - c < kDvChunk ? dv - c : kDvChunk;
    accumulate_values(acc + c, s, values + c, dv, width, row.lo, row.hi, shrink, rescale);
  }
  rows.l[r] += fold_lanes(lane);
}

void attention_step_simd(const AttentionRows& rows, const float* keys, const float* values,
                         int64_t n_keys) {
  const int64_t d = rows.head_dim, dv = rows.head_dim_v;
  if (d % 8 != 0 || dv % 8 != 0) {
    ref::attention_step(rows, keys, values, n_keys);
    return;
  }
  alignas(32) float s[kAttnMaxKeys];
  for (int64_t r = 0; r < rows.n_rows; ++r) {
    if (rows.lo[r] < rows.hi[r]) attend_row(rows, r, keys, values, s);
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

}  // namespace
}  // namespace hypura::compute
