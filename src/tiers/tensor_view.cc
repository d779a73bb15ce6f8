#include "tiers/tensor_view.h"

namespace hypura::tiers {

Status AddressableProvider::acquire(int layer, std::span<const model::TensorId> ids,
                                    std::span<compute::WeightView> out) {
  for (size_t i = 0; i < ids.size(); ++i) out[i] = view(ids[i]);
  return Status::ok();
}

Status AddressableProvider::acquire_experts(int layer,
                                            std::span<const model::ExpertRequest> requests,
                                            std::span<compute::WeightView> out) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const gguf::TensorInfo& t = file_.tensors()[static_cast<size_t>(requests[i].tensor)];
    out[i] = expert_view(t, view(requests[i].tensor), requests[i].expert);
  }
  return Status::ok();
}

}  // namespace hypura::tiers
