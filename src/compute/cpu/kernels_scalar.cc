// Scalar reference dot products: the twins every SIMD kernel is tested against.
//
// Each follows the integer-dot design of the formats: within a block the products of
// weight quants and 8-bit activation quants are summed exactly in integers, then scaled
// once per block (K-quants: per sub-block scale in integers, the super-block scales in
// float, the minimums through the activation's per-16 sums).
#include <cstring>

#include "compute/cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

namespace hypura::compute::ref {

using namespace hypura::quant;

float dot_f32(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const float*>(w);
  const auto* b = static_cast<const float*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float dot_f16(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_f32(a[i]) * b[i];
  return sum;
}

float dot_bf16(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_f32(a[i]) * b[i];
  return sum;
}

float dot_q4_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j];
      sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + kQK / 2];
    }
    sum += static_cast<float>(sumi) * (fp16_to_f32(a[i].d) * fp16_to_f32(b[i].d));
  }
  return sum;
}

float dot_q4_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (a[i].qs[j] & 0xF) * b[i].qs[j];
      sumi += (a[i].qs[j] >> 4) * b[i].qs[j + kQK / 2];
    }
    sum += static_cast<float>(sumi) * (fp16_to_f32(a[i].d) * fp16_to_f32(b[i].d)) +
           fp16_to_f32(a[i].m) * fp16_to_f32(b[i].s);
  }
  return sum;
}

// The 32 five-bit values of a Q5 block, unsigned (0..31).
static void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + kQK / 2] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
  }
}

float dot_q5_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sum = 0.0f;
  int q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    unpack_q5(a[i].qs, a[i].qh, q);
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += (q[j] - 16) * b[i].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_f32(a[i].d) * fp16_to_f32(b[i].d));
  }
  return sum;
}

float dot_q5_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  float sum = 0.0f;
  int q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    unpack_q5(a[i].qs, a[i].qh, q);
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += q[j] * b[i].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_f32(a[i].d) * fp16_to_f32(b[i].d)) +
           fp16_to_f32(a[i].m) * fp16_to_f32(b[i].s);
  }
  return sum;
}

float dot_q8_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ8_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += a[i].qs[j] * b[i].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_f32(a[i].d) * fp16_to_f32(b[i].d));
  }
  return sum;
}

float dot_mxfp4(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockMXFP4*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += kMxfp4Values[a[i].qs[j] & 0xF] * b[i].qs[j];
      sumi += kMxfp4Values[a[i].qs[j] >> 4] * b[i].qs[j + kQK / 2];
    }
    sum += static_cast<float>(sumi) * (e8m0_half_to_f32(a[i].e) * fp16_to_f32(b[i].d));
  }
  return sum;
}

// Sum over a 16-element sub-block of q(i) * y.qs[i], q supplied by a getter.
template <class Q>
static int sub_dot16(int sub, const int8_t* yq, Q q) {
  int s = 0;
  for (int l = 0; l < 16; ++l) s += q(sub * 16 + l) * yq[sub * 16 + l];
  return s;
}

float dot_q2_k(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ2_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    auto q = [&](int e) {
      return (a[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    };
    int isum = 0, summs = 0;
    for (int j = 0; j < 16; ++j) {
      isum += (a[i].scales[j] & 0xF) * sub_dot16(j, b[i].qs, q);
      summs += (a[i].scales[j] >> 4) * b[i].bsums[j];
    }
    const float dall = b[i].d * fp16_to_f32(a[i].d);
    const float dmin = b[i].d * fp16_to_f32(a[i].dmin);
    sum += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sum;
}

float dot_q3_k(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ3_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  int8_t scales[16];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    unpack_scales_q3_k(a[i].scales, scales);
    auto q = [&](int e) {
      const int low = (a[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      return low - (((a[i].hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4);
    };
    int isum = 0;
    for (int j = 0; j < 16; ++j) isum += scales[j] * sub_dot16(j, b[i].qs, q);
    sum += b[i].d * fp16_to_f32(a[i].d) * static_cast<float>(isum);
  }
  return sum;
}

// Q4_K / Q5_K share the scale layout: 8 sub-blocks of 32 with 6-bit scale and min.
template <class Block, class Q>
static float k4_block(const Block& a, const BlockQ8_K& b, Q q) {
  int isum = 0, summs = 0;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(j, a.scales, &sc, &m);
    isum += sc * (sub_dot16(2 * j, b.qs, q) + sub_dot16(2 * j + 1, b.qs, q));
    summs += m * (b.bsums[2 * j] + b.bsums[2 * j + 1]);
  }
  const float d = b.d * fp16_to_f32(a.d);
  const float dmin = b.d * fp16_to_f32(a.dmin);
  return d * static_cast<float>(isum) - dmin * static_cast<float>(summs);
}

float dot_q4_k(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    auto q = [&](int e) { return (a[i].qs[(e / 64) * 32 + e % 32] >> (4 * ((e / 32) % 2))) & 0xF; };
    sum += k4_block(a[i], b[i], q);
  }
  return sum;
}

float dot_q5_k(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    auto q = [&](int e) {
      const int low = (a[i].qs[(e / 64) * 32 + e % 32] >> (4 * ((e / 32) % 2))) & 0xF;
      return low | (((a[i].qh[e % 32] >> (e / 32)) & 1) << 4);
    };
    sum += k4_block(a[i], b[i], q);
  }
  return sum;
}

float dot_q6_k(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ6_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    auto q = [&](int e) {
      const int c = e / 128, h = (e % 128) / 64, s = (e % 128) / 32;
      const int low = (a[i].ql[c * 64 + e % 64] >> (4 * h)) & 0xF;
      const int high = (a[i].qh[c * 32 + e % 32] >> (2 * s)) & 3;
      return (low | (high << 4)) - 32;
    };
    int isum = 0;
    for (int j = 0; j < 16; ++j) isum += a[i].scales[j] * sub_dot16(j, b[i].qs, q);
    sum += b[i].d * fp16_to_f32(a[i].d) * static_cast<float>(isum);
  }
  return sum;
}

void silu_mul(float* gate, const float* up, int64_t n) {
  silu(gate, n);  // the ops the GPU tests take as their reference
  mul(gate, up, n);
}

void gelu_mul(float* gate, const float* up, int64_t n) {
  gelu_tanh_fp16(gate, n);
  mul(gate, up, n);
}

}  // namespace hypura::compute::ref

namespace hypura::compute {

const KernelTable& scalar_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    t.name = "scalar";
    t.level = SimdLevel::kScalar;
    auto set = [&](gguf::GgmlType type, TileFn fn) { t.tile[static_cast<int>(type)] = fn; };
    set(gguf::GgmlType::F32, tile_from_dot<ref::dot_f32>);
    set(gguf::GgmlType::F16, tile_from_dot<ref::dot_f16>);
    set(gguf::GgmlType::BF16, tile_from_dot<ref::dot_bf16>);
    set(gguf::GgmlType::Q4_0, tile_from_dot<ref::dot_q4_0>);
    set(gguf::GgmlType::Q4_1, tile_from_dot<ref::dot_q4_1>);
    set(gguf::GgmlType::Q5_0, tile_from_dot<ref::dot_q5_0>);
    set(gguf::GgmlType::Q5_1, tile_from_dot<ref::dot_q5_1>);
    set(gguf::GgmlType::Q8_0, tile_from_dot<ref::dot_q8_0>);
    set(gguf::GgmlType::MXFP4, tile_from_dot<ref::dot_mxfp4>);
    set(gguf::GgmlType::Q2_K, tile_from_dot<ref::dot_q2_k>);
    set(gguf::GgmlType::Q3_K, tile_from_dot<ref::dot_q3_k>);
    set(gguf::GgmlType::Q4_K, tile_from_dot<ref::dot_q4_k>);
    set(gguf::GgmlType::Q5_K, tile_from_dot<ref::dot_q5_k>);
    set(gguf::GgmlType::Q6_K, tile_from_dot<ref::dot_q6_k>);
    t.widen_rows = ref::widen_rows;
    t.widen_keys = ref::widen_keys;
    t.attention_step = ref::attention_step;
    t.silu_mul = ref::silu_mul;
    t.gelu_mul = ref::gelu_mul;
    return t;
  }();
  return table;
}

}  // namespace hypura::compute
