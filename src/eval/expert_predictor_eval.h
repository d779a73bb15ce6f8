// Offline measurement of the two next-layer expert predictors of issue 8 on a real
// forward pass:
//
//   router    apply layer L+1's router to layer L's FFN input (the hidden state the
//             router of L saw) and take its top-k: what L+1 will choose, known one layer
//             early;
//   coact     the co-activation statistics (coactivation.h) learned online, token by
//             token, from the routing seen so far (min_score 0.5, as the provider uses).
//
// The WeightProvider interface gives a provider the routing but never an activation, so
// the router predictor cannot run inside the expert provider without a model hook
// (docs/MOE.md). It is measured here through the interface alone: a wrapper provider
// hands the model layer L+1's router when it asks for layer L's, so route(L) reports the
// router predictor's choice for L+1 on L's exact hidden state. One normal pass records the
// true routing; one pass per layer L (0..n_layer-2) records the prediction for L+1 (the
// layers after L compute on a wrong routing and are ignored). Tokens run as one batch.
//
// Thread-safety: none; runs the model on the calling thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace hypura::eval {

struct PredictorScore {
  uint64_t predicted = 0;     // experts predicted (all tokens, layers 1..n_layer-1)
  uint64_t correct = 0;       // of those, chosen by the layer's router
  uint64_t chosen = 0;        // experts chosen at layers that had a prediction
  uint64_t wasted_bytes = 0;  // wrong predictions x the expert's bytes (if all were read)
  double precision() const { return predicted ? static_cast<double>(correct) / predicted : 0; }
  double recall() const { return chosen ? static_cast<double>(correct) / chosen : 0; }
};

struct PredictorEval {
  int64_t n_tokens = 0;
  int n_layer = 0, n_expert = 0, n_expert_used = 0;
  PredictorScore router, coact;
};

// REQUIRES: a MoE model (stacked *_exps and ffn_gate_inp tensors) and
// 0 < tokens.size() <= its context length.
Result<PredictorEval> evaluate_expert_predictors(const gguf::GgufFile& file,
                                                 std::shared_ptr<const model::Model> model,
                                                 std::span<const int32_t> tokens);

}  // namespace hypura::eval
