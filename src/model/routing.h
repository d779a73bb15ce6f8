// MoE routing of one row: the router's logits to the selected experts and their weights.
//
// The variants the supported families use, after llama.cpp's build_moe_ffn:
//   gating      kSoftmax: probabilities = softmax(logits) (mixtral, qwen3moe, deepseek-v2)
//               kSigmoid: probabilities = sigmoid(logits) (deepseek-v3, glm4moe)
//               kSoftmaxWeight: top-k on the raw logits, the weights a softmax over the
//               k chosen (gpt-oss)
//   bias        exp_probs_b added to the probabilities for the selection only; the
//               weights are the unbiased probabilities
//   groups      n_expert_groups > 1: each group scores the sum of its two best (biased)
//               probabilities, only the n_group_used best groups' experts compete
//   norm        the k weights divided by their sum (clamped below at fp16's smallest normal)
//   scale       the weights multiplied by expert_weights_scale
// Ties go to the lower expert (or group) id, as compute::top_k decides them.
//
// Thread-safety: pure functions on caller memory.
#pragma once

#include <cstdint>

#include "model/hparams.h"

namespace hypura::model {

// Routes one row. logits: (n_expert) the router's output, overwritten with the gating's
// probabilities; bias: (n_expert) or null; scratch: (n_expert) floats; selected, weights:
// (n_expert_used) expert ids by slot and their weights.
// REQUIRES: hp.n_expert > 0 and a routing check_routing() accepts.
void route_row(const HParams& hp, float* logits, const float* bias, float* scratch,
               int32_t* selected, float* weights);

// Whether hp's routing fields are consistent (groups divide the experts, enough experts in
// the used groups...); the error names the key.
Status check_routing(const HParams& hp);

}  // namespace hypura::model
