// Reference (de)quantizers for the GGUF block formats (blocks.h).
//
// Pure functions on caller-owned buffers: no threads, no I/O, no allocation.
// "Row" means n consecutive elements; n must be a multiple of the type's block size.
//
// Three kinds of quantizer live here:
//   * quantize_row_ref: weights. Legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and MXFP4
//     round exactly like ggml's reference quantizers (and gguf-py's numpy ones); K-quants use a
//     simple scale search of our own whose round-trip error is bounded (see quant_test.cc).
//   * quantize_row_q8_0 / q8_1 / q8_k: activations, rounded exactly as llama.cpp's CPU
//     backend rounds x before an integer dot product, so logits match its reference data.
#pragma once

#include <cstdint>

#include "gguf/gguf.h"
#include "quant/blocks.h"

namespace hypura::quant {

using gguf::GgmlType;

// True for the types this module can dequantize (and the kernels can multiply).
bool is_supported(GgmlType type);
// Elements per block and bytes per block. REQUIRES: is_supported(type) or Q8_1 / Q8_K.
int64_t block_size(GgmlType type);
int64_t type_size(GgmlType type);
// Bytes of a row of n elements. REQUIRES: n % block_size(type) == 0.
uint64_t row_size(GgmlType type, int64_t n);

// The 8-bit format activations are rounded to before a dot with weights of `type`
// (Q8_K for K-quants, Q8_1 for Q4_1/Q5_1, Q8_0 for Q4_0/Q5_0/Q8_0/MXFP4), or F32 when the
// product is computed in float (F32, F16, BF16 weights).
GgmlType activation_type(GgmlType weight_type);

// dst[0..n) = values of the row at src. REQUIRES: is_supported(type).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Quantizes n floats into row_size(type, n) bytes at dst.
// REQUIRES: is_supported(type). F16/BF16 round to nearest even; F32 copies.
void quantize_row_ref(GgmlType type, const float* src, void* dst, int64_t n);

// Activation quantizers (llama.cpp's CPU rounding: scale = amax / 127, q = rint(x * 127 / amax)).
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
// Q8_K: scale = -max / 127 where max is the signed value of largest magnitude.
void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n);
// Dispatches on act_type (Q8_0, Q8_1, Q8_K); F32 copies.
void quantize_activations(GgmlType act_type, const float* x, void* y, int64_t n);

// Per-type dequantizers (n elements, n % block size == 0).
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);
void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n);
void dequantize_row_q2_k(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_row_q3_k(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_row_q8_k(const BlockQ8_K* x, float* y, int64_t n);

// Per-type reference weight quantizers.
void quantize_row_q4_0_ref(const float* x, BlockQ4_0* y, int64_t n);
void quantize_row_q4_1_ref(const float* x, BlockQ4_1* y, int64_t n);
void quantize_row_q5_0_ref(const float* x, BlockQ5_0* y, int64_t n);
void quantize_row_q5_1_ref(const float* x, BlockQ5_1* y, int64_t n);
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int64_t n);
// MXFP4 as ggml: the block's scale is 2^(floor(log2(amax)) - 2) in E2M1 units (values above
// 6 times it clip), each value the nearest code, the first in table order on ties.
void quantize_row_mxfp4_ref(const float* x, BlockMXFP4* y, int64_t n);
void quantize_row_q2_k_ref(const float* x, BlockQ2_K* y, int64_t n);
void quantize_row_q3_k_ref(const float* x, BlockQ3_K* y, int64_t n);
void quantize_row_q4_k_ref(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q5_k_ref(const float* x, BlockQ5_K* y, int64_t n);
void quantize_row_q6_k_ref(const float* x, BlockQ6_K* y, int64_t n);

}  // namespace hypura::quant
