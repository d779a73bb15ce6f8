// GGUF quantization block formats, declared once and shared by every kernel.
//
// Each struct is the exact byte image of one block as stored in a GGUF file (ggml's
// layout), little-endian, no padding. Halves (`uint16_t d`) are IEEE fp16 bit patterns;
// see fp16.h. Element i of a row lives in block i / block_size.
//
// Weight formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 (32-element blocks) and the K-quants
// Q2_K..Q6_K (256-element super-blocks with 16 or 8 sub-blocks and quantized scales).
// Activation formats (what x is rounded to before an integer dot product): Q8_0 and
// Q8_1 (32 elements, Q8_1 also carries d * sum(qs)), and Q8_K (256 elements, float
// scale, per-16 sums used to apply the K-quant minimums).
#pragma once

#include <cstdint>

namespace hypura::quant {

constexpr int kQK = 32;     // elements per legacy block
constexpr int kQK_K = 256;  // elements per K-quant super-block

// x = d * (q - 8), q in 0..15; qs[j] holds element j (low nibble) and j + 16 (high).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// x = d * q + m, q in 0..15; nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
// x = d * (q - 16), q in 0..31; bit 4 of element j is bit j of qh (little-endian u32).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// x = d * q + m, q in 0..31; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// x = d * q, q in -128..127 (weights use -127..127).
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// MXFP4 (OCP microscaling FP4): x = e8m0_half_to_f32(e) * kMxfp4Values[q], q a 4-bit E2M1
// code (bit 3 the sign); nibble order as Q4_0. Its activations are Q8_0.
struct BlockMXFP4 {
  uint8_t e;  // E8M0: a power of two, biased by 127
  uint8_t qs[kQK / 2];
};
// The 16 E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives) doubled to integers.
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
// Activation format for Q4_1 / Q5_1: x = d * q; s = d * sum(qs) applies the weight's m.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};

// 16 sub-blocks of 16: x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q in 0..3.
// Element c*128 + s*32 + m (c < 2, s < 4, m < 32) is bits 2s..2s+1 of qs[c*32 + m].
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
// 16 sub-blocks of 16: x = d * (scale6[j] - 32) * (q - 4 * !hbit), q in 0..3.
// Low bits as Q2_K; the high bit of element b*32 + m is bit b of hmask[m].
// The 6-bit scales are packed in 12 bytes: low nibbles of scale v (v < 16) in byte
// v % 8 (nibble v / 8), high 2 bits in byte 8 + v % 4 at bit 2 * (v / 4).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], q in 0..15, 6-bit sc/m packed
// in 12 bytes (see unpack_scale_min_k4). Element c*64 + h*32 + m is nibble h of qs[c*32+m].
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
// As Q4_K with a fifth bit: bit 4 of element b*32 + m is bit b of qh[m].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q in 0..63.
// Element c*128 + h*64 + m (m < 64): low nibble = nibble h of ql[c*64 + m];
// element c*128 + s*32 + m (m < 32): high 2 bits = bits 2s..2s+1 of qh[c*32 + m].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
// Activation format for K-quants: x = d * q; bsums[j] = sum of qs[16j .. 16j+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of sub-block j (< 8) of a Q4_K / Q5_K block.
inline void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The 16 signed scales (scale6 - 32) of a Q3_K block.
inline void unpack_scales_q3_k(const uint8_t* packed, int8_t* out) {
  for (int v = 0; v < 16; ++v) {
    const int low = (packed[v % 8] >> (4 * (v / 8))) & 0xF;
    const int high = (packed[8 + v % 4] >> (2 * (v / 4))) & 3;
    out[v] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

}  // namespace hypura::quant
