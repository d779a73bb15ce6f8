// WeightProvider: the one interface that makes tiering possible.
//
// The forward pass never asks where a tensor lives; it asks the provider for views of a
// layer's weights, uses them, and releases the layer. Implementations decide where bytes
// come from (resident RAM, a streamed pool slot, an expert cache, GPU memory) but never
// how they are computed, so every provider yields bit-identical logits. One pass:
//
//   begin_pass()            a forward pass begins (a streaming provider starts reading
//                           its first layers)
//   acquire(-1, globals)    tensors outside the layer stack (token_embd, output, norms),
//                           held to the end of the pass
//   for each layer L:
//     acquire(L, ids)       views valid until release(L); may wait for in-flight reads
//     acquire_experts(L, ..) MoE: views of the selected experts' slices, after routing
//     release(L)            the layer's compute is done; its memory may be reused (a
//                           streaming provider reads ahead into it)
//   release(-1)
//
// A MoE provider that reads experts on demand also sees the routing through
// ExpertRouting (routing() returns it; null for every other provider).
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

// The routing hooks of a MoE layer, for a provider that reads experts on demand. The
// model calls them around each MoE layer's expert products, in this order; all are hints
// that may start reads or reorder work but never change what acquire_experts serves.
class ExpertRouting {
 public:
  virtual ~ExpertRouting() = default;
  // A MoE layer's normalized FFN input, the vector its router is applied to, of the last
  // token of each sequence of the batch: x (n_rows, n_embd) row-major, one row per
  // sequence (a prompt batch: its last token; a decode step of several sequences: each
  // one's token). Called right before that layer's routing and valid only during the call
  // (a provider may apply later layers' routers to it, to read their likely experts early).
  virtual void observe_hidden(int layer, std::span<const float> x, int64_t n_rows) = 0;
  // `selected` is (n_tokens, n_expert_used): each token's expert ids by slot. The model
  // then acquires the batch's distinct experts in the order of order_experts(), one expert
  // (its gate, up, down slices) per acquire_experts call, computing each before asking for
  // the next, so a provider that started every read here overlaps the reads of later
  // experts with the compute of earlier ones.
  virtual void route(int layer, std::span<const int32_t> selected, int n_expert_used) = 0;
  // Called after route(L) with the batch's distinct experts in ascending id order; may
  // permute them into the order it can serve soonest (e.g. cached ones first, then reads
  // in the order they will arrive). The model keeps each expert's output per (token, slot)
  // and sums them in slot order, so the order never changes the result.
  virtual void order_experts(int layer, std::span<int32_t> experts) = 0;
};

class WeightProvider {
 public:
  virtual ~WeightProvider() = default;

  // A forward pass begins: called once per batch, before its first acquire.
  virtual Status begin_pass() { return Status::ok(); }
  // Views of whole tensors of `layer` (-1: outside the layer stack), in the order of `ids`.
  // REQUIRES: out.size() == ids.size(). Returns an error only when a read failed; nothing
  // is computed on an incomplete buffer.
  virtual Status acquire(int layer, std::span<const TensorId> ids,
                         std::span<compute::WeightView> out) = 0;
  // Views of single experts (n_rows_per_expert rows each), in request order. Expert views
  // stay valid until the next acquire_experts call of the same layer or release(layer).
  virtual Status acquire_experts(int layer, std::span<const ExpertRequest> requests,
                                 std::span<compute::WeightView> out) = 0;
  virtual void release(int layer) = 0;

  // The MoE routing hooks, or null when this provider has no use for them.
  virtual ExpertRouting* routing() { return nullptr; }
  // Bytes read from storage so far (0 for a resident provider after load).
  virtual uint64_t bytes_read() const { return 0; }
  virtual std::string name() const = 0;
};

}  // namespace hypura::model
