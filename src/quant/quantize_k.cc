// Reference quantizers for the K-quant weight formats.
//
// A simple, deterministic scheme of our own (not llama.cpp's iterative search): each
// sub-block gets the smallest scale that covers its range, the super-block scale is
// rounded *up* to fp16 so no sub-block scale overflows its bit width, and sub-block
// scales are rounded up as well. Consequence (tested in quant_test.cc): every value
// round-trips within half a step of its sub-block, plus one min-step for the
// asymmetric formats (Q2_K, Q4_K, Q5_K) whose quantized minimum may overshoot.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/fp16.h"
#include "quant/quant.h"

namespace hypura::quant {
namespace {

// fp16 of v >= 0, rounded up so that the half is >= v (when representable).
uint16_t fp16_round_up(float v) {
  uint16_t h = f32_to_fp16(v);
  if (fp16_to_f32(h) < v && h < 0x7bff) ++h;
  return h;
}

// ceil(v / step) clamped to [0, limit]; 0 when step is 0.
int ceil_ratio(float v, float step, int limit) {
  if (step <= 0.0f) return 0;
  return std::clamp(static_cast<int>(std::ceil(v / step)), 0, limit);
}

int round_clamp(float v, int lo, int hi) {
  return std::clamp(static_cast<int>(std::nearbyint(v)), lo, hi);
}

// Asymmetric sub-block scaling: x ~= d * sc[j] * q - dmin * m[j], q in 0..nmax.
// Fills q (n_sub * sub_len values), sc, m (n_sub each, in 0..scale_max) and the halves.
void quantize_asym(const float* x, int n_sub, int sub_len, int nmax, int scale_max, int* q, int* sc,
                   int* m, uint16_t* d_out, uint16_t* dmin_out) {
  float scale[16], min[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < n_sub; ++j) {
    const float* v = x + j * sub_len;
    float lo = 0.0f, hi = v[0];
    for (int l = 0; l < sub_len; ++l) {
      lo = std::min(lo, v[l]);
      hi = std::max(hi, v[l]);
    }
    scale[j] = (hi - lo) / static_cast<float>(nmax);
    min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  *d_out = fp16_round_up(max_scale / static_cast<float>(scale_max));
  *dmin_out = fp16_round_up(max_min / static_cast<float>(scale_max));
  const float d = fp16_to_f32(*d_out), dmin = fp16_to_f32(*dmin_out);
  for (int j = 0; j < n_sub; ++j) {
    sc[j] = ceil_ratio(scale[j], d, scale_max);
    m[j] = ceil_ratio(min[j], dmin, scale_max);
    const float step = d * static_cast<float>(sc[j]);
    const float offset = dmin * static_cast<float>(m[j]);
    for (int l = 0; l < sub_len; ++l) {
      const float v = x[j * sub_len + l] + offset;
      q[j * sub_len + l] = step > 0.0f ? round_clamp(v / step, 0, nmax) : 0;
    }
  }
}

// Symmetric sub-block scaling: x ~= d * sc[j] * q, q in -(qmax+1)..qmax, sc in 1..scale_max.
void quantize_sym(const float* x, int n_sub, int sub_len, int qmax, int scale_max, int* q, int* sc,
                  uint16_t* d_out) {
  float scale[16];
  float max_scale = 0.0f;
  for (int j = 0; j < n_sub; ++j) {
    float amax = 0.0f;
    for (int l = 0; l < sub_len; ++l) amax = std::max(amax, std::fabs(x[j * sub_len + l]));
    scale[j] = amax / static_cast<float>(qmax);
    max_scale = std::max(max_scale, scale[j]);
  }
  *d_out = fp16_round_up(max_scale / static_cast<float>(scale_max));
  const float d = fp16_to_f32(*d_out);
  for (int j = 0; j < n_sub; ++j) {
    sc[j] = ceil_ratio(scale[j], d, scale_max);
    const float step = d * static_cast<float>(sc[j]);
    for (int l = 0; l < sub_len; ++l) {
      const float v = x[j * sub_len + l];
      q[j * sub_len + l] = step > 0.0f ? round_clamp(v / step, -qmax - 1, qmax) : 0;
    }
  }
}

// Packs eight 6-bit scales and mins into the 12-byte Q4_K / Q5_K layout.
void pack_scale_min_k4(const int* sc, const int* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

}  // namespace

void quantize_row_q4_k_ref(const float* x, BlockQ4_K* y, int64_t n) {
  int q[kQK_K], sc[8], m[8];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    quantize_asym(x, 8, 32, 15, 63, q, sc, m, &y[b].d, &y[b].dmin);
    pack_scale_min_k4(sc, m, y[b].scales);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        y[b].qs[c * 32 + l] = static_cast<uint8_t>(q[c * 64 + l] | (q[c * 64 + 32 + l] << 4));
      }
    }
  }
}

void quantize_row_q5_k_ref(const float* x, BlockQ5_K* y, int64_t n) {
  int q[kQK_K], sc[8], m[8];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    quantize_asym(x, 8, 32, 31, 63, q, sc, m, &y[b].d, &y[b].dmin);
    pack_scale_min_k4(sc, m, y[b].scales);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[c * 64 + l], hi = q[c * 64 + 32 + l];
        y[b].qs[c * 32 + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        y[b].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_row_q2_k_ref(const float* x, BlockQ2_K* y, int64_t n) {
  int q[kQK_K], sc[16], m[16];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    quantize_asym(x, 16, 16, 3, 15, q, sc, m, &y[b].d, &y[b].dmin);
    for (int j = 0; j < 16; ++j) y[b].scales[j] = static_cast<uint8_t>(sc[j] | (m[j] << 4));
    std::memset(y[b].qs, 0, sizeof(y[b].qs));
    for (int i = 0; i < kQK_K; ++i) {
      const int c = i / 128, s = (i % 128) / 32;
      y[b].qs[c * 32 + i % 32] |= static_cast<uint8_t>(q[i] << (2 * s));
    }
  }
}

void quantize_row_q3_k_ref(const float* x, BlockQ3_K* y, int64_t n) {
  int q[kQK_K], sc[16];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    quantize_sym(x, 16, 16, 3, 31, q, sc, &y[b].d);
    std::memset(y[b].scales, 0, sizeof(y[b].scales));
    for (int v = 0; v < 16; ++v) {
      const int s6 = sc[v] + 32;
      y[b].scales[v % 8] |= static_cast<uint8_t>((s6 & 0xF) << (4 * (v / 8)));
      y[b].scales[8 + v % 4] |= static_cast<uint8_t>((s6 >> 4) << (2 * (v / 4)));
    }
    std::memset(y[b].qs, 0, sizeof(y[b].qs));
    std::memset(y[b].hmask, 0, sizeof(y[b].hmask));
    for (int i = 0; i < kQK_K; ++i) {
      const int u = q[i] + 4;  // 0..7: low 2 bits in qs, bit 2 in hmask
      const int c = i / 128, s = (i % 128) / 32;
      y[b].qs[c * 32 + i % 32] |= static_cast<uint8_t>((u & 3) << (2 * s));
      y[b].hmask[i % 32] |= static_cast<uint8_t>((u >> 2) << (i / 32));
    }
  }
}

void quantize_row_q6_k_ref(const float* x, BlockQ6_K* y, int64_t n) {
  int q[kQK_K], sc[16];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    quantize_sym(x, 16, 16, 31, 127, q, sc, &y[b].d);
    for (int j = 0; j < 16; ++j) y[b].scales[j] = static_cast<int8_t>(sc[j]);
    for (int c = 0; c < 2; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int* v = q + c * 128 + l;
        const int u0 = v[0] + 32, u1 = v[32] + 32, u2 = v[64] + 32, u3 = v[96] + 32;
        y[b].ql[c * 64 + l] = static_cast<uint8_t>((u0 & 0xF) | ((u2 & 0xF) << 4));
        y[b].ql[c * 64 + 32 + l] = static_cast<uint8_t>((u1 & 0xF) | ((u3 & 0xF) << 4));
        y[b].qh[c * 32 + l] = static_cast<uint8_t>((u0 >> 4) | ((u1 >> 4) << 2) | ((u2 >> 4) << 4) |
                                                   ((u3 >> 4) << 6));
      }
    }
  }
}

}  // namespace hypura::quant
