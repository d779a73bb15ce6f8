// Matrix-vector products on the GPU for decode: y = W x for one activation row, for every
// weight format the CPU multiplies (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4,
// Q2_K .. Q6_K).
//
// Activations are rounded as the CPU rounds them (quant::activation_type: Q8_K for
// K-quants, Q8_0 or Q8_1 for the 32-element formats, float for F32/F16/BF16) by the same
// operations (quantize.h), so GPU and CPU products differ only by the order of float
// additions. The weight matrix is in GGUF layout in device memory, rows 16-byte aligned
// (cudaMalloc'd tensors of real shapes are; MXFP4 rows may have any alignment); W.n_cols a
// multiple of the block size.
//
// Thread-safety: one caller per scratch buffer. No allocation: the caller owns scratch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/compute.h"
#include "compute/cuda/act_q8.h"
#include "compute/cuda/device.h"
#include "compute/cuda/matvec_launch.h"  // kMatvecMaxTokens

namespace hypura::compute::cuda {

// True for the weight types matvec() multiplies.
bool matvec_supported(gguf::GgmlType type);
// Bytes of device scratch matvec() needs for activations of up to n_cols columns.
size_t matvec_scratch_bytes(int64_t n_cols);

// y[r] = sum_k W[r, k] * x[k] for r < W.n_rows. w.data, x (W.n_cols floats), y (W.n_rows
// floats) and scratch (>= matvec_scratch_bytes(W.n_cols), 256-byte aligned) are device
// memory. Queued on `stream`; errors surface at Stream::synchronize().
// REQUIRES: matvec_supported(w.type), rows of w 16-byte aligned, x 16-byte aligned.
void matvec(const WeightView& w, const float* x, float* y, void* scratch, StreamHandle stream);

// matvec() in its two steps, so products that share an input (Q, K and V; gate and up)
// quantize it once: quantize_for() rounds x for weights of `type` into scratch (F32/F16/BF16:
// nothing to do, act.x = x), matvec_quantized() multiplies. Weights whose types share an
// activation format (quant::activation_type) may share one quantized x.
ActQ8 quantize_for(gguf::GgmlType type, const float* x, int64_t n_cols, void* scratch,
                   StreamHandle stream);
// add_to (optional, W.n_rows floats): residual rows the product is also added to in the
// same launch (add_to[r] += y[r], compute::add's float addition).
void matvec_quantized(const WeightView& w, const ActQ8& act, float* y, StreamHandle stream,
                      float* add_to = nullptr);

// Activations of row r of rows quantized together (quantize_for over n_rows * n_cols
// values: the formats' blocks never straddle rows, so a batch quantizes in one launch).
ActQ8 act_row(const ActQ8& act, gguf::GgmlType type, int64_t n_cols, int64_t r);

// Grouped products (MoE): for pair i < n_pairs, y[i, :] (expert.n_rows floats) = E_ids[i] .
// x_(i / act_div), where E_e is the e-th of the n_experts matrices of expert's shape in the
// stacked tensor starting at expert.data and x_a is row a of act (quantized as above). ids:
// device int32. Each pair's result is its single-token product bit for bit, whether the
// experts are read once per pair or, with several pairs per expert, once for all of them.
void matvec_grouped(const WeightView& expert, int64_t n_experts, const int32_t* ids,
                    int64_t n_pairs, int act_div, const ActQ8& act, float* y, StreamHandle stream);
// Two stacked tensors of one type and shape (gate and up) on the same pairs and activations,
// in one launch: y = matvec_grouped(first), y_second = matvec_grouped(second).
void matvec_grouped_pair(const WeightView& first, const WeightView& second, int64_t n_experts,
                         const int32_t* ids, int64_t n_pairs, int act_div, const ActQ8& act,
                         float* y, float* y_second, StreamHandle stream);

// y = W . x and y_second = W_second . x for one token and two matrices of one type and
// shape (K beside V, up beside gate), in one launch where that keeps each product's
// single-token order (the shape does not split rows over two warps), else in two: bit for
// bit two matvec_quantized() calls either way.
void matvec_pair(const WeightView& w, const WeightView& w_second, const ActQ8& act, float* y,
                 float* y_second, StreamHandle stream);

// Batched products for a few tokens: y[t, :] = W . x_t for t < n (n <= kMatvecMaxTokens),
// the weights read once; x_t is row t of act (quantized over n * W.n_cols values), y is
// (n, W.n_rows). Each row's result is bit for bit what matvec_quantized() gives that row
// in a configuration without a split (one or two rows per warp), whatever n.
void matvec_batched(const WeightView& w, const ActQ8& act, int64_t n, float* y,
                    StreamHandle stream);

}  // namespace hypura::compute::cuda
