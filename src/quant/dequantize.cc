// Reference dequantizers: one loop per format, written to mirror the block layout
// comments in blocks.h. Multiplication order follows ggml (d * sc first, then * q,
// then - m) so results equal gguf-py's numpy dequantize bit for bit.
#include <cassert>
#include <cstring>

#include "quant/fp16.h"
#include "quant/quant.h"

namespace hypura::quant {

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_f32(x[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((x[b].qs[j] & 0xF) - 8) * d;
      y[j + kQK / 2] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_f32(x[b].d);
    const float m = fp16_to_f32(x[b].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(x[b].qs[j] & 0xF) + m;
      y[j + kQK / 2] = d * static_cast<float>(x[b].qs[j] >> 4) + m;
    }
  }
}

// The 32 five-bit values of a Q5 block (qs nibbles + qh bits), unsigned.
static void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + kQK / 2] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
  }
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  int q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_f32(x[b].d);
    unpack_q5(x[b].qs, x[b].qh, q);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q[j] - 16);
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  int q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_f32(x[b].d);
    const float m = fp16_to_f32(x[b].m);
    unpack_q5(x[b].qs, x[b].qh, q);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q[j]) + m;
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_f32(x[b].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = e8m0_half_to_f32(x[b].e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(kMxfp4Values[x[b].qs[j] & 0xF]) * d;
      y[j + kQK / 2] = static_cast<float>(kMxfp4Values[x[b].qs[j] >> 4]) * d;
    }
  }
}

void dequantize_row_q2_k(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = fp16_to_f32(x[b].d);
    const float dmin = fp16_to_f32(x[b].dmin);
    for (int i = 0; i < kQK_K; ++i) {
      const int c = i / 128, s = (i % 128) / 32, m = i % 32;
      const uint8_t sc = x[b].scales[i / 16];
      const float dl = d * static_cast<float>(sc & 0xF);
      const float ml = dmin * static_cast<float>(sc >> 4);
      y[i] = dl * static_cast<float>((x[b].qs[c * 32 + m] >> (2 * s)) & 3) - ml;
    }
  }
}

void dequantize_row_q3_k(const BlockQ3_K* x, float* y, int64_t n) {
  int8_t scales[16];
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = fp16_to_f32(x[b].d);
    unpack_scales_q3_k(x[b].scales, scales);
    for (int i = 0; i < kQK_K; ++i) {
      const int c = i / 128, s = (i % 128) / 32, m = i % 32;
      const int low = (x[b].qs[c * 32 + m] >> (2 * s)) & 3;
      const int high = (x[b].hmask[m] >> (i / 32)) & 1;
      const float dl = d * static_cast<float>(scales[i / 16]);
      y[i] = dl * static_cast<float>(low - (high ? 0 : 4));
    }
  }
}

void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = fp16_to_f32(x[b].d);
    const float dmin = fp16_to_f32(x[b].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(j, x[b].scales, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      const uint8_t* qs = x[b].qs + (j / 2) * 32;
      for (int l = 0; l < 32; ++l) {
        y[j * 32 + l] = dl * static_cast<float>((qs[l] >> (4 * (j % 2))) & 0xF) - ml;
      }
    }
  }
}

void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = fp16_to_f32(x[b].d);
    const float dmin = fp16_to_f32(x[b].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(j, x[b].scales, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      const uint8_t* qs = x[b].qs + (j / 2) * 32;
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[l] >> (4 * (j % 2))) & 0xF) | (((x[b].qh[l] >> j) & 1) << 4);
        y[j * 32 + l] = dl * static_cast<float>(q) - ml;
      }
    }
  }
}

void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = fp16_to_f32(x[b].d);
    for (int i = 0; i < kQK_K; ++i) {
      const int c = i / 128, h = (i % 128) / 64, s = (i % 128) / 32;
      const int low = (x[b].ql[c * 64 + i % 64] >> (4 * h)) & 0xF;
      const int high = (x[b].qh[c * 32 + i % 32] >> (2 * s)) & 3;
      const float dl = d * static_cast<float>(x[b].scales[i / 16]);
      y[i] = dl * static_cast<float>((low | (high << 4)) - 32);
    }
  }
}

void dequantize_row_q8_k(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    for (int i = 0; i < kQK_K; ++i) y[i] = x[b].d * static_cast<float>(x[b].qs[i]);
  }
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case GgmlType::Q4_0:
      return dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n);
    case GgmlType::Q4_1:
      return dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n);
    case GgmlType::Q5_0:
      return dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n);
    case GgmlType::Q5_1:
      return dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n);
    case GgmlType::Q8_0:
      return dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
    case GgmlType::MXFP4:
      return dequantize_row_mxfp4(static_cast<const BlockMXFP4*>(src), dst, n);
    case GgmlType::Q2_K:
      return dequantize_row_q2_k(static_cast<const BlockQ2_K*>(src), dst, n);
    case GgmlType::Q3_K:
      return dequantize_row_q3_k(static_cast<const BlockQ3_K*>(src), dst, n);
    case GgmlType::Q4_K:
      return dequantize_row_q4_k(static_cast<const BlockQ4_K*>(src), dst, n);
    case GgmlType::Q5_K:
      return dequantize_row_q5_k(static_cast<const BlockQ5_K*>(src), dst, n);
    case GgmlType::Q6_K:
      return dequantize_row_q6_k(static_cast<const BlockQ6_K*>(src), dst, n);
    case GgmlType::Q8_K:
      return dequantize_row_q8_k(static_cast<const BlockQ8_K*>(src), dst, n);
    default:
      assert(false && "dequantize_row: unsupported type");
  }
}

}  // namespace hypura::quant
