// Mixture-of-experts pieces on the GPU, the twins of model::CpuBlocks' routing and sums:
// top-k selection over softmaxed router rows, gathering a batch's rows for one expert,
// scattering expert outputs to their (token, slot) rows, and the weighted slot sum.
//
// All pointers are device memory; work is queued on `stream`.
#pragma once

#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

// How moe_route turns router logits into experts and weights: model::route_row's variants
// (model/routing.h), which compute/cuda cannot name.
enum class RouteGating {
  kSoftmax,    // probabilities = softmax(logits)
  kSigmoid,    // probabilities = sigmoid(logits)
  kSoftmaxOfK  // top k of the logits, the weights a softmax over the k (gpt-oss)
};
inline constexpr int64_t kRouteMaxExperts = 8192;  // the routing kernel's shared memory
struct RouteOptions {
  RouteGating gating = RouteGating::kSoftmax;
  const float* logit_bias = nullptr;   // (n_expert) added to the logits first (gpt-oss), or null
  const float* select_bias = nullptr;  // (n_expert) exp_probs_b: for the selection only, or null
  int n_groups = 0;                    // > 1: group-limited top-k over n_groups equal groups
  int n_group_used = 0;                //      of which the n_group_used best compete
  bool norm = true;                    // weights divided by their sum (clamped as the CPU)
  float scale = 1.0f;                  // weights multiplied by this
};

// Each token's router logits (probs, overwritten with the gating's probabilities) to its
// k experts by slot (selected (n_tokens, k)) and their weights (n_tokens, k), in one launch
// per batch: exactly model::route_row's selection (ties to the lower id), the weights equal
// up to the rounding of exp. REQUIRES: n_expert <= kRouteMaxExperts, n_groups <= 64.
void moe_route(float* probs, int64_t n_tokens, int64_t n_expert, int64_t k, int32_t* selected,
               float* weights, StreamHandle stream, const RouteOptions& options = {});

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
// shared (optional, like out): rows added to each sum last (the shared expert's output).
// add_to (optional, like out): residual rows out is also added to (compute::add's addition).
void moe_combine(const float* slot_out, const float* weights, int64_t n_tokens, int64_t k,
                 int64_t width, float* out, StreamHandle stream, float* add_to = nullptr,
                 const float* shared = nullptr);

}  // namespace hypura::compute::cuda
