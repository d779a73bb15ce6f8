// Random valid quant blocks. Block byte layouts are ggml's (declared in quant/blocks.h);
// here only the positions of the scales matter, since every quant bit is random.
#include "synth/random_blocks.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/fp16.h"

namespace hypura::synth {
namespace {

using gguf::GgmlType;

// splitmix64: tiny, fast, and good enough to look like weights.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {  // [lo, hi)
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
  int range(int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  void bytes(uint8_t* dst, size_t n) {
    for (; n >= 8; n -= 8, dst += 8) {
      uint64_t r = next();
      std::memcpy(dst, &r, 8);
    }
    if (n > 0) {
      uint64_t r = next();
      std::memcpy(dst, &r, n);
    }
  }

 private:
  uint64_t state_;
};

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void put_f16(uint8_t* dst, float v) {
  uint16_t h = quant::f32_to_fp16(v);
  std::memcpy(dst, &h, 2);
}

// Standard deviation of a uniform integer on [0, n-1]: sqrt((n^2 - 1) / 12).
constexpr float uniform_int_std(int n) {
  return static_cast<float>(n) * 0.28867513f;  // n / sqrt(12); n^2 >> 1 here
}

// Sub-block scales are drawn from [kScaleLo, kScaleHi] (6-bit range, even values so the
// K-quant minimum cancels the mean exactly), so block scale d = std / (mean scale * q std).
constexpr int kScaleLo = 40;
constexpr int kScaleHi = 62;
constexpr float kScaleMean = 0.5f * (kScaleLo + kScaleHi);
// Per-block jitter of d: real models' block scales vary by tens of percent.
constexpr float kJitterLo = 0.8f;
constexpr float kJitterHi = 1.2f;

int even_scale(Rng& rng) {
  return kScaleLo + 2 * rng.range(0, (kScaleHi - kScaleLo) / 2);
}

// Q4_K / Q5_K pack eight 6-bit scales and eight 6-bit mins in 12 bytes (the inverse of
// ggml's get_scale_min_k4): j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 in the
// nibbles of byte j + 4 with their top 2 bits in bits 6-7 of bytes j - 4 and j.
void pack_scales_k4(const int sc[8], const int m[8], uint8_t out[12]) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] & 63);
    out[j + 4] = static_cast<uint8_t>(m[j] & 63);
  }
  for (int j = 4; j < 8; ++j) {
    out[j + 4] = static_cast<uint8_t>((sc[j] & 0xf) | ((m[j] & 0xf) << 4));
    out[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
    out[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
  }
}

// Q4_K (144 B: d, dmin, scales[12], qs[128]) and Q5_K (176 B: d, dmin, scales[12],
// qh[32], qs[128]): x = d * sc * q - dmin * m with q uniform on [0, levels). Choosing
// m = sc / 2 and dmin = d * (levels - 1) makes every sub-block's mean exactly zero.
void make_k4_k5(Rng& rng, float d_base, int levels, uint8_t* dst, size_t quant_bytes) {
  float d = d_base * rng.uniform(kJitterLo, kJitterHi);
  put_f16(dst, d);
  put_f16(dst + 2, d * static_cast<float>(levels - 1));
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = even_scale(rng);
    m[j] = sc[j] / 2;
  }
  pack_scales_k4(sc, m, dst + 4);
  rng.bytes(dst + 16, quant_bytes);
}

// Q6_K (210 B: ql[128], qh[64], scales[16] int8, d): x = d * sc * (q - 32), q in 0..63.
void make_q6_k(Rng& rng, float d_base, uint8_t* dst) {
  rng.bytes(dst, 192);
  for (int j = 0; j < 16; ++j) {
    int8_t s = static_cast<int8_t>(even_scale(rng));
    std::memcpy(dst + 192 + j, &s, 1);
  }
  put_f16(dst + 208, d_base * rng.uniform(kJitterLo, kJitterHi));
}

// Q8_0 (34 B: d, qs[32] int8): x = d * q; -128 is mapped to -127 as quantizers do.
void make_q8_0(Rng& rng, float d_base, uint8_t* dst) {
  put_f16(dst, d_base * rng.uniform(kJitterLo, kJitterHi));
  rng.bytes(dst + 2, 32);
  for (int i = 2; i < 34; ++i) {
    if (dst[i] == 0x80) dst[i] = 0x81;
  }
}

// Q5_0 (22 B: d, qh[4], qs[16]): x = d * (q - 16). Q5_1 (24 B: d, m, qh[4], qs[16]):
// x = d * q + m with m = -15.5 d (zero mean).
void make_q5_0(Rng& rng, float d_base, uint8_t* dst) {
  put_f16(dst, d_base * rng.uniform(kJitterLo, kJitterHi));
  rng.bytes(dst + 2, 20);
}
void make_q5_1(Rng& rng, float d_base, uint8_t* dst) {
  float d = d_base * rng.uniform(kJitterLo, kJitterHi);
  put_f16(dst, d);
  put_f16(dst + 2, -15.5f * d);
  rng.bytes(dst + 4, 20);
}

// MXFP4 (17 B: e, qs[16]): x = 2^(e - 128) * v, v a doubled E2M1 value (quant/blocks.h),
// codes uniform (mean 0, v std sqrt(34.25)). The scale is a power of two, so each block
// takes exponent e0 or e0 + 1 with the probability that makes the mean of d^2 the target.
constexpr float kMxfp4ValueStd = 5.8523500f;  // sqrt(mean of the 16 values squared)

struct Mxfp4Scale {
  int e0 = 0;         // biased E8M0 exponent of the smaller scale
  float p_up = 0.0f;  // probability of e0 + 1
};

Mxfp4Scale mxfp4_scale(float std) {
  const float d = std / kMxfp4ValueStd;  // the scale, were it continuous
  Mxfp4Scale s;
  if (!(d > 0.0f)) return s;
  const int lg = static_cast<int>(std::floor(std::log2(d)));
  s.e0 = std::clamp(lg + 128, 2, 253);
  const float d0 = std::ldexp(1.0f, s.e0 - 128);
  s.p_up = std::clamp((d * d / (d0 * d0) - 1.0f) / 3.0f, 0.0f, 1.0f);
  return s;
}

void make_mxfp4(Rng& rng, const Mxfp4Scale& scale, uint8_t* dst) {
  dst[0] = static_cast<uint8_t>(scale.e0 + (rng.uniform(0.0f, 1.0f) < scale.p_up ? 1 : 0));
  rng.bytes(dst + 1, 16);
}

// Block scale d that gives the requested std for each type (see the layouts above).
float base_scale(GgmlType type, float std) {
  switch (type) {
    case GgmlType::Q4_K:
      return std / (kScaleMean * uniform_int_std(16));
    case GgmlType::Q5_K:
      return std / (kScaleMean * uniform_int_std(32));
    case GgmlType::Q6_K:
      return std / (kScaleMean * uniform_int_std(64));
    case GgmlType::Q8_0:
      return std / uniform_int_std(255);
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
      return std / uniform_int_std(32);
    default:
      return 0.0f;
  }
}

}  // namespace

bool can_generate(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::Q8_0:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::MXFP4:
      return true;
    default:
      return false;
  }
}

uint64_t tensor_seed(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return mix64(seed ^ mix64(h));
}

TensorBytes::TensorBytes(GgmlType type, ValueSpec values, uint64_t seed)
    : type_(type), values_(values), seed_(seed) {
  assert(can_generate(type));
  if (type == GgmlType::F32 || type == GgmlType::F16) {
    unit_bytes_ = kFloatUnit * (type == GgmlType::F32 ? 4 : 2);
    // A uniform distribution over 256 levels: mean +- std * sqrt(3).
    for (int k = 0; k < 256; ++k) {
      float u = (static_cast<float>(k) + 0.5f) / 128.0f - 1.0f;  // (-1, 1)
      f32_table_[k] = values.mean + values.std * 1.7320508f * u;
      f16_table_[k] = quant::f32_to_fp16(f32_table_[k]);
    }
    return;
  }
  assert(values.mean == 0.0f);
  unit_bytes_ = static_cast<uint64_t>(gguf::type_traits(type).type_size);
  d_base_ = base_scale(type, values.std);
  if (type == GgmlType::MXFP4) {
    const Mxfp4Scale m = mxfp4_scale(values.std);
    mxfp4_e0_ = m.e0;
    mxfp4_p_up_ = m.p_up;
  }
}

void TensorBytes::make_unit(uint64_t unit, uint8_t* dst) const {
  Rng rng(mix64(seed_ + mix64(unit)));
  switch (type_) {
    case GgmlType::F32: {
      uint8_t r[kFloatUnit];
      rng.bytes(r, kFloatUnit);
      for (int i = 0; i < kFloatUnit; ++i) std::memcpy(dst + 4 * i, &f32_table_[r[i]], 4);
      break;
    }
    case GgmlType::F16: {
      uint8_t r[kFloatUnit];
      rng.bytes(r, kFloatUnit);
      for (int i = 0; i < kFloatUnit; ++i) std::memcpy(dst + 2 * i, &f16_table_[r[i]], 2);
      break;
    }
    case GgmlType::Q4_K:
      make_k4_k5(rng, d_base_, 16, dst, 128);
      break;
    case GgmlType::Q5_K:
      make_k4_k5(rng, d_base_, 32, dst, 160);
      break;
    case GgmlType::Q6_K:
      make_q6_k(rng, d_base_, dst);
      break;
    case GgmlType::Q8_0:
      make_q8_0(rng, d_base_, dst);
      break;
    case GgmlType::Q5_0:
      make_q5_0(rng, d_base_, dst);
      break;
    case GgmlType::Q5_1:
      make_q5_1(rng, d_base_, dst);
      break;
    case GgmlType::MXFP4:
      make_mxfp4(rng, Mxfp4Scale{mxfp4_e0_, mxfp4_p_up_}, dst);
      break;
    default:
      assert(false && "type not generated");
  }
}

void TensorBytes::fill(uint64_t offset, std::span<uint8_t> out) const {
  uint8_t partial[512];  // the largest unit: 128 F32 elements
  assert(unit_bytes_ <= sizeof(partial));
  uint64_t end = offset + out.size();
  for (uint64_t unit = offset / unit_bytes_; unit * unit_bytes_ < end; ++unit) {
    uint64_t lo = unit * unit_bytes_;
    uint64_t hi = lo + unit_bytes_;
    if (lo >= offset && hi <= end) {  // whole unit inside the range: write in place
      make_unit(unit, out.data() + (lo - offset));
      continue;
    }
    make_unit(unit, partial);
    uint64_t from = std::max(lo, offset);
    uint64_t to = std::min(hi, end);
    std::memcpy(out.data() + (from - offset), partial + (from - lo), to - from);
  }
}

}  // namespace hypura::synth
