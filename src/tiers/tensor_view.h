// Views of GGUF tensor bytes for the compute kernels, shared by every WeightProvider: the
// providers differ only in where the bytes are (RAM, a pool slot, an mmap), never in how a
// tensor's shape becomes a WeightView.
#pragma once

#include <cstdint>

#include "compute/compute.h"
#include "gguf/gguf.h"
#include "model/weight_provider.h"

namespace hypura::tiers {

// The whole tensor `t` whose bytes start at `data`: n_cols = ne[0], n_rows = the rest.
inline compute::WeightView tensor_view(const gguf::TensorInfo& t, const uint8_t* data) {
  compute::WeightView v;
  v.data = data;
  v.type = t.type;
  v.n_cols = t.ne.empty() ? 1 : t.ne[0];
  v.n_rows = t.n_rows();
  return v;
}

// One expert's matrix inside `whole`, the view of a stacked (n_cols, n_rows, n_expert)
// expert tensor `t`: that expert's n_rows consecutive rows.
inline compute::WeightView expert_view(const gguf::TensorInfo& t, const compute::WeightView& whole,
                                       int expert) {
  const int64_t rows_per_expert = t.ne.size() > 1 ? t.ne[1] : 1;
  return whole.rows(expert * rows_per_expert, rows_per_expert);
}

// A provider whose every tensor is one contiguous view that is always present (owned RAM,
// an mmap): acquire and acquire_experts are pointer arithmetic over view() and never fail.
// Thread-safety: as the subclass's view().
class AddressableProvider : public model::WeightProvider {
 public:
  // The view of a whole tensor (also for callers outside the forward pass).
  virtual compute::WeightView view(model::TensorId id) const = 0;

  Status acquire(int layer, std::span<const model::TensorId> ids,
                 std::span<compute::WeightView> out) final;
  Status acquire_experts(int layer, std::span<const model::ExpertRequest> requests,
                         std::span<compute::WeightView> out) final;
  void release(int layer) final {}

 protected:
  explicit AddressableProvider(const gguf::GgufFile& file) : file_(file) {}
  const gguf::GgufFile& file_;  // must outlive the provider
};

}  // namespace hypura::tiers
