// CPU kernel tables: one per instruction set, chosen once at start (dispatch.cc).
//
// The unit of work is a tile: n_rows weight rows against n_tok activation rows,
//   y[t * y_stride + r] = dot(W row r, X row t)   for r < n_rows, t < n_tok,
// where W rows are w_stride bytes apart (GGUF layout) and activation rows x_stride bytes
// apart, already in quant::activation_type(weight type) (F32 for float weights).
//
// Batch invariance contract: every kernel computes each output element with the same
// sequence of floating-point operations whatever n_rows, n_tok and the tile's position,
// so a row's result does not depend on how the matrix was split or batched.
//
// Every SIMD kernel has a scalar twin in kernels_scalar.cc with the same signature;
// kernel tests compare them with named error bounds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/compute.h"
#include "gguf/gguf.h"

namespace hypura::compute {

using TileFn = void (*)(int64_t n, const void* w, size_t w_stride, int n_rows, const void* x,
                        size_t x_stride, int n_tok, float* y, size_t y_stride);
// Rounds n floats of x to the activation format a tile function expects (same size as
// quant::activation_type's format; a kernel may reorder elements inside a block).
using QuantizeActFn = void (*)(const float* x, void* y, int64_t n);

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3, kAmx = 4 };
constexpr int kSimdLevels = 5;  // scalar .. amx

// Attention kernels (see Context::widen_rows / attention_step in compute.h).
using WidenRowsFn = void (*)(const KvRows& src, int64_t n_rows, int64_t width, float* out);
using WidenKeysFn = void (*)(const KvRows& src, int64_t n_keys, int64_t d, float* out);
using AttentionStepFn = void (*)(const AttentionRows& rows, const float* keys_t,
                                 const KvRows& values, int64_t n_keys);
// gate[i] = silu(gate[i]) * up[i] for i < n (the SwiGLU of a gated FFN).
using SiluMulFn = void (*)(float* gate, const float* up, int64_t n);

constexpr int kMaxTypeId = 40;

struct KernelTable {
  const char* name = "scalar";
  SimdLevel level = SimdLevel::kScalar;
  TileFn tile[kMaxTypeId] = {};  // by GGUF type id; nullptr falls back to scalar
  // By weight type id; nullptr: quant::quantize_activations(activation_type(type)).
  // Only set together with the matching tile (a table's own layout never leaks out).
  QuantizeActFn quantize_act[kMaxTypeId] = {};
  WidenRowsFn widen_rows = nullptr;          // never null once a table is built
  WidenKeysFn widen_keys = nullptr;          // never null once a table is built
  AttentionStepFn attention_step = nullptr;  // never null once a table is built
  SiluMulFn silu_mul = nullptr;              // never null once a table is built
  SiluMulFn gelu_mul = nullptr;              // never null once a table is built
  // int8 multiply-accumulates per second of one thread running the path's dot-product
  // instructions on registers for about `seconds`; null: not measured (scalar).
  double (*int8_peak)(double seconds) = nullptr;
};

// The table for `level`, or nullptr when this build or this CPU lacks it.
const KernelTable* kernel_table(SimdLevel level);
// The best level this CPU supports.
SimdLevel default_simd_level();
const char* simd_level_name(SimdLevel level);
bool cpu_supports(SimdLevel level);

// The tile function for a weight type at `table`, falling back to the scalar one.
// Returns nullptr for types without kernels.
TileFn tile_fn(const KernelTable& table, gguf::GgmlType type);
// The activation quantizer that goes with tile_fn(table, type); nullptr: the standard one.
QuantizeActFn quantize_act_fn(const KernelTable& table, gguf::GgmlType type);

// Per-ISA tables (defined in the per-ISA files; they only fill what they accelerate).
const KernelTable& scalar_kernels();
void fill_avx2_kernels(KernelTable* table);
void fill_avx512_kernels(KernelTable* table);
void fill_avx512vnni_kernels(KernelTable* table);
// avx512vnni with the Q4_K / Q5_K / Q6_K products on the AMX tile unit (kernels_amx.cc).
void fill_amx_kernels(KernelTable* table);
// The AVX2 + FMA + F16C attention kernels, the SwiGLU and the int8 peak probe, used by every
// level from AVX2 up; the AVX-512 levels then take the AVX-512 attention kernels.
void fill_avx2_attention(KernelTable* table);
void fill_avx512_attention(KernelTable* table);

// Scalar dot products (the reference twins): one weight row against one activation row.
namespace ref {
float dot_f32(int64_t n, const void* w, const void* x);
float dot_f16(int64_t n, const void* w, const void* x);
float dot_bf16(int64_t n, const void* w, const void* x);
float dot_q4_0(int64_t n, const void* w, const void* x);
float dot_q4_1(int64_t n, const void* w, const void* x);
float dot_q5_0(int64_t n, const void* w, const void* x);
float dot_q5_1(int64_t n, const void* w, const void* x);
float dot_q8_0(int64_t n, const void* w, const void* x);
float dot_mxfp4(int64_t n, const void* w, const void* x);
float dot_q2_k(int64_t n, const void* w, const void* x);
float dot_q3_k(int64_t n, const void* w, const void* x);
float dot_q4_k(int64_t n, const void* w, const void* x);
float dot_q5_k(int64_t n, const void* w, const void* x);
float dot_q6_k(int64_t n, const void* w, const void* x);
// Attention twins (attention_ref.cc).
void widen_rows(const KvRows& src, int64_t n_rows, int64_t width, float* out);
void widen_keys(const KvRows& src, int64_t n_keys, int64_t d, float* out);
void attention_step(const AttentionRows& rows, const float* keys_t, const KvRows& values,
                    int64_t n_keys);
void silu_mul(float* gate, const float* up, int64_t n);  // compute::silu, then mul
void gelu_mul(float* gate, const float* up, int64_t n);  // compute::gelu_tanh_fp16, then mul
}  // namespace ref

// A tile built from a one-row dot function: loops rows outside, tokens inside.
template <float (*Dot)(int64_t, const void*, const void*)>
void tile_from_dot(int64_t n, const void* w, size_t w_stride, int n_rows, const void* x,
                   size_t x_stride, int n_tok, float* y, size_t y_stride) {
  for (int r = 0; r < n_rows; ++r) {
    const void* wr = static_cast<const uint8_t*>(w) + r * w_stride;
    for (int t = 0; t < n_tok; ++t) {
      y[t * y_stride + r] = Dot(n, wr, static_cast<const uint8_t*>(x) + t * x_stride);
    }
  }
}

}  // namespace hypura::compute
