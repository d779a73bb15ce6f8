// WeightProvider: the one interface that makes tiering possible.
//
// The forward pass never asks where a tensor lives; it asks the provider for views of a
// layer's weights, uses them, and releases the layer. Implementations decide where bytes
// come from (resident RAM, a streamed pool slot, an expert cache, later GPU memory) but
// never how they are computed, so every provider yields bit-identical logits.
//
//   hint(L + k)            lets a streaming provider start reads for a later layer
//   observe_hidden(L, x)   a MoE layer's FFN input of each sequence's last token, before
//                          its router (an expert provider may guess later layers'
//                          experts from it)
//   acquire(L, ids)        views valid until release(L); may wait for in-flight reads
//   route(L, selected)     router interception: the experts layer L's batch selected,
//                          before its expert matmuls (an expert provider starts reads here)
//   order_experts(L, ids)  the order to compute them in (those already in RAM first)
//   acquire_experts(L, ..) views of selected experts' slices of the stacked *_exps tensors
//   release(L)             the layer's compute is done; slots may be reused
//
// Layer index -1 addresses tensors outside the layer stack (token_embd, output, norms).
// Thread-safety: called from the single thread that drives the forward pass.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "compute/compute.h"

namespace hypura::model {

// Index into the model's tensor directory (GgufFile::tensors()); model/weights.h names
// the same type.
using TensorId = int32_t;

struct ExpertRequest {
  TensorId tensor;  // a stacked *_exps tensor: ne = (n_cols, n_rows_per_expert, n_expert)
  int32_t expert;
};

class WeightProvider {
 public:
  virtual ~WeightProvider() = default;

  // Views of whole tensors, in the order of `ids`. REQUIRES: out.size() == ids.size().
  // Returns an error only when a read failed; nothing is computed on an incomplete buffer.
  virtual Status acquire(int layer, std::span<const TensorId> ids,
                         std::span<compute::WeightView> out) = 0;
  // Router interception. `selected` is (n_tokens, n_expert_used): each token's expert ids
  // by slot. The model then acquires the batch's distinct experts in the order of
  // order_experts(), one expert (its gate, up, down slices) per acquire_experts call,
  // computing each before asking for the next, so a provider that started every read here
  // overlaps the reads of later experts with the compute of earlier ones.
  virtual void route(int layer, std::span<const int32_t> selected, int n_expert_used) {}
  // Called after route(L) with the batch's distinct experts in ascending id order; may
  // permute them into the order it can serve soonest (e.g. cached ones first, then reads
  // in the order they will arrive). The model keeps each expert's output per (token, slot)
  // and sums them in slot order, so the order never changes the result.
  virtual void order_experts(int layer, std::span<int32_t> experts) {}
  // A MoE layer's normalized FFN input, the vector its router is applied to, of the last
  // token of each sequence of the batch: x (n_rows, n_embd) row-major, one row per
  // sequence (a prompt batch: its last token; a decode step of several sequences: each
  // one's token). Called right before that layer's routing and valid only during the call.
  // Only a hint: a provider may compute on it (e.g. later layers' routers, to read their
  // likely experts early) but must not change what it serves.
  virtual void observe_hidden(int layer, std::span<const float> x, int64_t n_rows) {}
  // Views of single experts (n_rows_per_expert rows each), in request order. Expert views
  // stay valid until the next acquire_experts call of the same layer or release(layer).
  virtual Status acquire_experts(int layer, std::span<const ExpertRequest> requests,
                                 std::span<compute::WeightView> out) = 0;
  virtual void release(int layer) = 0;
  virtual void hint(int layer) {}

  // Bytes read from storage so far (0 for a resident provider after load).
  virtual uint64_t bytes_read() const { return 0; }
  virtual std::string name() const = 0;
};

}  // namespace hypura::model
