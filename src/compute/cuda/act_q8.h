// The layout of 8-bit activations in device memory, shared by the activation quantizer
// (quantize.cu) and the quantized matrix-vector kernels.
//
// The values are exactly the CPU's (quant::quantize_row_q8_0 / q8_1 / q8_k: the same
// quants, the same fp16- or float-rounded scales), only laid out planar so that loads are
// aligned: q (n_cols int8, 256-byte aligned), then d (one float per 32 elements, the fp16
// scale widened; for Q8_K one float per 256 elements), then s (Q8_1: d * sum(q) rounded to
// fp16, one per 32). Q8_K's per-16 sums are recomputed from q by the kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hypura::compute::cuda {

struct ActQ8 {
  const int8_t* q = nullptr;  // (n_cols)
  const float* d = nullptr;   // (n_cols / 32) or (n_cols / 256) for Q8_K
  const float* s = nullptr;   // (n_cols / 32), Q8_1 only
  const float* x = nullptr;   // (n_cols) the float activations (F32/F16/BF16 weights)
};

// Byte offsets of the arrays inside a scratch buffer for n_cols columns.
struct ActQ8Layout {
  size_t q = 0, d = 0, s = 0, total = 0;
};

inline size_t align256(size_t v) {
  return (v + 255) / 256 * 256;
}

inline ActQ8Layout act_q8_layout(int64_t n_cols) {
  ActQ8Layout l;
  const size_t n = static_cast<size_t>(n_cols);
  l.q = 0;
  l.d = align256(n);
  l.s = l.d + align256((n + 31) / 32 * sizeof(float));
  l.total = l.s + align256((n + 31) / 32 * sizeof(float));
  return l;
}

}  // namespace hypura::compute::cuda
