// IEEE half (fp16), bfloat16 and E8M0 <-> float conversions, exact and portable (no F16C).
//
// Rounding is to nearest even, as ggml's GGML_FP32_TO_FP16 / GGML_FP32_TO_BF16 do, so
// scales written by our quantizers are bit-identical to llama.cpp's. SIMD kernels use
// the hardware conversions (vcvtph2ps), which give the same results.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace hypura::quant {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;   // nan stays nan (quiet)
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to inf
  if (abs < 0x38800000u) {                       // below 2^-14: subnormal half
    // |f| * 2^24 is exact; rint rounds half to even like the bit path below.
    const float scaled = bits_float(abs) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t r = abs - (112u << 23);  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);   // round mantissa 23 -> 10 bits, ties to even
  return sign | static_cast<uint16_t>(r >> 13);
}

inline float bf16_to_f32(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);  // quiet nan
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Half of the E8M0 scale e (2^(e - 127)), i.e. 2^(e - 128): MXFP4's table holds twice the
// E2M1 values, so this is the factor its codes are multiplied by. Exact (e < 2: subnormal);
// e = 255 (NaN in OCP MX) is read as a plain exponent, as ggml does.
inline float e8m0_half_to_f32(uint8_t e) {
  return bits_float(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23);
}

}  // namespace hypura::quant
