// Type sizes, the legacy weight quantizers (bit-exact with ggml's reference ones) and
// the activation quantizers (bit-exact with llama.cpp's x86 CPU backend).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/fp16.h"
#include "quant/quant.h"

namespace hypura::quant {

bool is_supported(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

int64_t block_size(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      return 1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::Q8_K:
      return kQK_K;
    default:
      return kQK;
  }
}

int64_t type_size(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return 4;
    case GgmlType::F16:
    case GgmlType::BF16:
      return 2;
    case GgmlType::Q4_0:
      return sizeof(BlockQ4_0);
    case GgmlType::Q4_1:
      return sizeof(BlockQ4_1);
    case GgmlType::Q5_0:
      return sizeof(BlockQ5_0);
    case GgmlType::Q5_1:
      return sizeof(BlockQ5_1);
    case GgmlType::Q8_0:
      return sizeof(BlockQ8_0);
    case GgmlType::Q8_1:
      return sizeof(BlockQ8_1);
    case GgmlType::MXFP4:
      return sizeof(BlockMXFP4);
    case GgmlType::Q2_K:
      return sizeof(BlockQ2_K);
    case GgmlType::Q3_K:
      return sizeof(BlockQ3_K);
    case GgmlType::Q4_K:
      return sizeof(BlockQ4_K);
    case GgmlType::Q5_K:
      return sizeof(BlockQ5_K);
    case GgmlType::Q6_K:
      return sizeof(BlockQ6_K);
    case GgmlType::Q8_K:
      return sizeof(BlockQ8_K);
    default:
      assert(false && "type_size: unsupported type");
      return 0;
  }
}

uint64_t row_size(GgmlType type, int64_t n) {
  assert(n % block_size(type) == 0);
  return static_cast<uint64_t>(n / block_size(type)) * static_cast<uint64_t>(type_size(type));
}

GgmlType activation_type(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
      return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
      return GgmlType::Q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return GgmlType::Q8_K;
    default:
      return GgmlType::F32;
  }
}

// ---- legacy weight quantizers (ggml reference rounding: truncation of x*id + 0.5) ----

// The value of largest magnitude in x[0..n) (first one on ties) and its magnitude.
static float signed_absmax(const float* x, int n, float* amax_out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax_out) *amax_out = amax;
  return max;
}

void quantize_row_q4_0_ref(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = signed_absmax(x, kQK, nullptr) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + kQK / 2] * id + 8.5f));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

static void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = x[0];
  *mx = x[0];
  for (int j = 1; j < n; ++j) {
    *mn = std::min(*mn, x[j]);
    *mx = std::max(*mx, x[j]);
  }
}

void quantize_row_q4_1_ref(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float mn, mx;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_fp16(d);
    y[b].m = f32_to_fp16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>((x[j] - mn) * id + 0.5f));
      const int q1 = std::min(15, static_cast<int>((x[j + kQK / 2] - mn) * id + 0.5f));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Packs 32 five-bit values into qs nibbles and the qh bit mask.
static void pack_q5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + kQK / 2] & 0xF) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + kQK / 2] >> 4) & 1) << (j + kQK / 2);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

void quantize_row_q5_0_ref(const float* x, BlockQ5_0* y, int64_t n) {
  int q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = signed_absmax(x, kQK, nullptr) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
    pack_q5(q, y[b].qs, y[b].qh);
  }
}

void quantize_row_q5_1_ref(const float* x, BlockQ5_1* y, int64_t n) {
  int q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float mn, mx;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_fp16(d);
    y[b].m = f32_to_fp16(mn);
    for (int j = 0; j < kQK; ++j) q[j] = std::min(31, static_cast<int>((x[j] - mn) * id + 0.5f));
    pack_q5(q, y[b].qs, y[b].qh);
  }
}

void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax;
    signed_absmax(x, kQK, &amax);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

// The code nearest to x / d (x = d * kMxfp4Values[code]), the first in table order on ties.
static uint8_t nearest_mxfp4(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

void quantize_row_mxfp4_ref(const float* x, BlockMXFP4* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax;
    signed_absmax(x, kQK, &amax);
    // Biased exponent of amax / 4, kept in range for tiny, infinite or NaN blocks.
    const float e = amax > 0.0f ? std::floor(std::log2(amax)) - 2.0f + 127.0f : 0.0f;
    y[b].e = e >= 254.0f ? 254 : e > 0.0f ? static_cast<uint8_t>(e) : 0;
    const float d = e8m0_half_to_f32(y[b].e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[b].qs[j] =
          static_cast<uint8_t>(nearest_mxfp4(x[j], d) | (nearest_mxfp4(x[j + kQK / 2], d) << 4));
    }
  }
}

// ---- activation quantizers (llama.cpp x86: id = 127 / amax, round half to even) ----

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax;
    signed_absmax(x, kQK, &amax);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = f32_to_fp16(amax / 127.0f);
    for (int j = 0; j < kQK; ++j) y[b].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax;
    signed_absmax(x, kQK, &amax);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[b].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
      sum += y[b].qs[j];
    }
    y[b].d = f32_to_fp16(d);
    y[b].s = f32_to_fp16(d * static_cast<float>(sum));
  }
}

// ggml's nearest_int: round half to even through the float mantissa.
static int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  uint32_t i;
  std::memcpy(&i, &shifted, 4);
  return static_cast<int>(i & 0x007fffff) - 0x00400000;
}

void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float amax;
    const float max = signed_absmax(x, kQK_K, &amax);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      y[b].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[b].qs[j * 16 + l];
      y[b].bsums[j] = static_cast<int16_t>(sum);
    }
    y[b].d = 1.0f / iscale;
  }
}

void quantize_activations(GgmlType act_type, const float* x, void* y, int64_t n) {
  switch (act_type) {
    case GgmlType::Q8_0:
      return quantize_row_q8_0(x, static_cast<BlockQ8_0*>(y), n);
    case GgmlType::Q8_1:
      return quantize_row_q8_1(x, static_cast<BlockQ8_1*>(y), n);
    case GgmlType::Q8_K:
      return quantize_row_q8_k(x, static_cast<BlockQ8_K*>(y), n);
    case GgmlType::F32:
      std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
      return;
    default:
      assert(false && "quantize_activations: not an activation type");
  }
}

void quantize_row_ref(GgmlType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_fp16(src[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      return;
    case GgmlType::Q4_0:
      return quantize_row_q4_0_ref(src, static_cast<BlockQ4_0*>(dst), n);
    case GgmlType::Q4_1:
      return quantize_row_q4_1_ref(src, static_cast<BlockQ4_1*>(dst), n);
    case GgmlType::Q5_0:
      return quantize_row_q5_0_ref(src, static_cast<BlockQ5_0*>(dst), n);
    case GgmlType::Q5_1:
      return quantize_row_q5_1_ref(src, static_cast<BlockQ5_1*>(dst), n);
    case GgmlType::Q8_0:
      return quantize_row_q8_0_ref(src, static_cast<BlockQ8_0*>(dst), n);
    case GgmlType::MXFP4:
      return quantize_row_mxfp4_ref(src, static_cast<BlockMXFP4*>(dst), n);
    case GgmlType::Q2_K:
      return quantize_row_q2_k_ref(src, static_cast<BlockQ2_K*>(dst), n);
    case GgmlType::Q3_K:
      return quantize_row_q3_k_ref(src, static_cast<BlockQ3_K*>(dst), n);
    case GgmlType::Q4_K:
      return quantize_row_q4_k_ref(src, static_cast<BlockQ4_K*>(dst), n);
    case GgmlType::Q5_K:
      return quantize_row_q5_k_ref(src, static_cast<BlockQ5_K*>(dst), n);
    case GgmlType::Q6_K:
      return quantize_row_q6_k_ref(src, static_cast<BlockQ6_K*>(dst), n);
    default:
      assert(false && "quantize_row_ref: unsupported type");
  }
}

}  // namespace hypura::quant
