// Mixture-of-experts pieces on the GPU, the twins of model::CpuBlocks' routing and sums:
// top-k selection over softmaxed router rows, gathering a batch's rows for one expert,
// scattering expert outputs to their (token, slot) rows, and the weighted slot sum.
//
// All pointers are device memory; work is queued on `stream`.
#pragma once

#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

// softmax() of each token's router logits in place, then moe_top_k() of them, in one launch
// (the same results as the two). bias (n_expert, or null) is added to the logits first;
// softmax_of_k (gpt-oss's gating): the top k of the logits, their weights the softmax of
// the k.
void moe_route(float* probs, int64_t n_tokens, int64_t n_expert, int64_t k, int32_t* selected,
               float* weights, StreamHandle stream, const float* bias = nullptr,
               bool softmax_of_k = false);

// rows[r, :] += bias[ids[r], :] for r < n: each (token, slot) row its expert's bias row
// (gpt-oss's expert biases). Nothing when bias is null.
void add_rows_by_id(float* rows, const float* bias, const int32_t* ids, int64_t n, int64_t width,
                    StreamHandle stream);

// probs: (n_tokens, n_expert), already softmaxed. For each token: the k most probable
// experts by slot (the lower id on ties), selected (n_tokens, k), and their probabilities
// divided by their float sum (summed in slot order), weights (n_tokens, k): as the CPU.
void moe_top_k(const float* probs, int64_t n_tokens, int64_t n_expert, int64_t k, int32_t* selected,
               float* weights, StreamHandle stream);

// out[r, :] = x[pairs[r] / k, :] for r < n (pairs: token * k + slot). width floats per row.
void gather_rows(const float* x, const int32_t* pairs, int64_t n, int64_t k, int64_t width,
                 float* out, StreamHandle stream);
// dst[pairs[r], :] = src[r, :] for r < n.
void scatter_rows(const float* src, const int32_t* pairs, int64_t n, int64_t width, float* dst,
                  StreamHandle stream);

// out[t, :] = sum over slots s in order of slot_out[t * k + s, :] * weights[t * k + s]
// (each product rounded, then added: the CPU's scale-then-add). out may not alias slot_out.
// add_to (optional, like out): residual rows out is also added to (compute::add's addition).
void moe_combine(const float* slot_out, const float* weights, int64_t n_tokens, int64_t k,
                 int64_t width, float* out, StreamHandle stream, float* add_to = nullptr);

}  // namespace hypura::compute::cuda
