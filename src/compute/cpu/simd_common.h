// Small helpers shared by the SIMD kernel files (AVX2, AVX-512, AMX, attention): loads,
// half-float conversions, horizontal reductions of 256-bit vectors and the K-quant
// scale unpacking. Each including file compiles them with its own -m flags; they stay in
// an anonymous namespace (tile_common.h says why).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hypura::compute {
namespace {

inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

inline uint16_t f2h(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
inline __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

inline float hsum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

inline float hmax256(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// Pointers to the T activation rows.
template <class B, int T>
inline void act_rows(const uint8_t* x, size_t xs, const B** y) {
  for (int t = 0; t < T; ++t) y[t] = reinterpret_cast<const B*>(x + t * xs);
}

// The eight 6-bit scales and mins of a Q4_K / Q5_K block as bytes.
inline void unpack_k4(const uint8_t* s, uint64_t* sc, uint64_t* m) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t sc_hi = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
  *sc = (a & 0x3f3f3f3fu) | (static_cast<uint64_t>(sc_hi) << 32);
  *m = (b & 0x3f3f3f3fu) | (static_cast<uint64_t>(m_hi) << 32);
}

// The sixteen 6-bit Q3_K scales, minus 32, as int8 bytes.
inline __m128i unpack_q3k_scales(const uint8_t* s) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t lo = 0x0f0f0f0fu, hi = 0x03030303u;
  const uint32_t o0 = (a & lo) | ((c & hi) << 4);
  const uint32_t o1 = (b & lo) | (((c >> 2) & hi) << 4);
  const uint32_t o2 = ((a >> 4) & lo) | (((c >> 4) & hi) << 4);
  const uint32_t o3 = ((b >> 4) & lo) | (((c >> 6) & hi) << 4);
  return _mm_sub_epi8(_mm_set_epi32(static_cast<int>(o3), static_cast<int>(o2),
                                    static_cast<int>(o1), static_cast<int>(o0)),
                      _mm_set1_epi8(32));
}

}  // namespace
}  // namespace hypura::compute
