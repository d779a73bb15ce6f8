// Matrix products for prefill on the GPU: y (n, W.n_rows) = x (n, W.n_cols) W^T for many
// activation rows, through cuBLAS.
//
// F32 weights multiply F32 activations (cublasSgemm, full FP32: no TF32). Every other
// format is dequantized to F16 a tile of rows at a time (dequant.h) and multiplied on the
// tensor cores, accumulating in F32 (cublasGemmEx); F16 weights are used in place. The
// activations of quantized weights are first rounded to 8-bit blocks exactly as the CPU
// and the decode matvec round them (quantize.h), then widened to F16; those of F16/BF16
// weights are rounded to F16. So a prefill product differs from the CPU's and the decode
// matvec's by float rounding only: F16 values (relative 2^-12 per weight and activation)
// and the summation order.
//
// Thread-safety: one caller at a time (the handle and the scratch are the object's).
// Errors: cuBLAS's synchronous failures are returned; kernels' faults surface at the
// stream's next synchronize().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"
#include "compute/compute.h"
#include "compute/cuda/device.h"

struct cublasContext;  // cublasHandle_t is cublasContext*

namespace hypura::compute::cuda {

class Gemm {
 public:
  // A cuBLAS handle on `stream` and scratch for products of up to max_rows activation
  // rows of up to max_cols columns, dequantizing weight tiles of up to tile_elems elements.
  // x_elems: activation values converted at once, when more than max_rows * max_cols (the
  // (token, slot) rows of matmul_experts).
  static Result<std::unique_ptr<Gemm>> create(StreamHandle stream, int64_t max_rows,
                                              int64_t max_cols, int64_t tile_elems,
                                              int64_t x_elems = 0);
  // Device bytes create() takes for these sizes (the planner's estimate).
  static size_t scratch_bytes(int64_t max_rows, int64_t max_cols, int64_t tile_elems,
                              int64_t x_elems = 0);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y = x W^T. w, x, y in device memory. REQUIRES: 0 < n <= max_rows, w.n_cols <= max_cols,
  // matvec_supported(w.type).
  Status matmul(const WeightView& w, const float* x, int64_t n, float* y);
  // ys[i] = x ws[i]^T for i < count, products of one input (Q, K, V; gate, up): the
  // activations are converted once per activation format.
  Status matmul_shared(const WeightView* const* ws, float* const* ys, int count, const float* x,
                       int64_t n);
  // Per-head products of one stacked tensor (MLA's wk_b / wv_b): w holds n_heads matrices of
  // w.n_rows / n_heads rows each; x is (n, n_heads, w.n_cols) and y (n, n_heads, w.n_rows /
  // n_heads), row (t, h) of y = W_h x(t, h). One strided batched cuBLAS product per weight
  // tile of whole heads. REQUIRES: 0 < n, n_heads divides w.n_rows, a head's elements fit
  // a tile (tile_elems), matvec_supported(w.type).
  // A prompt's MoE products: x holds begin.back() rows grouped by expert (expert e's rows
  // begin[e] .. begin[e + 1]), and ys[i]'s row j = expert(e) of ws[i] . x row j. ws[i] is
  // expert 0's matrix of a stacked tensor of begin.size() - 1 experts (expert e's rows follow
  // at e times its bytes). The activations are converted once per activation format for
  // all rows; quantized, F16 and BF16 weights of a multiple of 8 columns are then multiplied
  // by one launch per tensor over every expert (expert_gemm.h), others (F32) by one cuBLAS
  // product per expert with rows. REQUIRES: begin.back() * w.n_cols <= the x capacity.
  Status matmul_experts(const WeightView* const* ws, float* const* ys, int count,
                        std::span<const int64_t> begin, const float* x);
  Status matmul_heads(const WeightView& w, int64_t n_heads, const float* x, int64_t n, float* y);

 private:
  // x16_ = x (count values) in the activation format of weights of `type`, widened to F16.
  void convert(gguf::GgmlType type, const float* x, int64_t count);

  Gemm() = default;
  StreamHandle stream_ = nullptr;
  cublasContext* handle_ = nullptr;
  int64_t max_rows_ = 0, max_cols_ = 0, tile_elems_ = 0, x_elems_ = 0;
  DeviceBuffer x16_;  // (x_elems) F16 activations
  DeviceBuffer w16_;  // (tile_elems) F16 weight tile
};

}  // namespace hypura::compute::cuda
