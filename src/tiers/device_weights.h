// DeviceWeights: weights of a model in GPU memory, read once at load (the GPU tier: all
// of a model that fits the GPU, or the GPU's share of a split, scheduler::GpuSplit).
//
// read() takes the chosen tensors straight from the model file through one pinned staging
// buffer into device memory taken with cudaMalloc (one allocation per tensor, never managed
// memory), so the host keeps no copy. Afterwards acquire() and acquire_experts() are
// pointer arithmetic over device views (AddressableProvider) for model::CudaBlocks.
//
// Out of memory is kResourceExhausted naming the tensor and the sizes; everything taken
// so far is freed. Without a CUDA build read() returns kUnsupported.
//
// Thread-safety: read() once; afterwards read-only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "gguf/gguf.h"
#include "model/weights.h"
#include "tiers/tensor_view.h"

namespace hypura::tiers {

class DeviceWeights final : public AddressableProvider {
 public:
  using Progress = std::function<void(uint64_t done, uint64_t total)>;  // bytes uploaded

  // The tensors with wanted[id] read straight from the model file into device memory, in
  // chunks through one pinned staging buffer (storage -> pinned RAM -> GPU). REQUIRES: file
  // outlives the provider. kInvalidArgument when wanted does not cover the file's tensors;
  // a failed read names the tensor and the file.
  static Result<std::unique_ptr<DeviceWeights>> read(const gguf::GgufFile& file,
                                                     const std::vector<bool>& wanted,
                                                     const Progress& progress = nullptr);
  ~DeviceWeights() override;

  std::string name() const override { return "cuda-resident"; }
  compute::WeightView view(model::TensorId id) const override;
  // Whether tensor `id` is in device memory.
  bool holds(model::TensorId id) const {
    return id >= 0 && static_cast<size_t>(id) < views_.size() && views_[id].data != nullptr;
  }
  uint64_t device_bytes() const { return device_bytes_; }

 private:
  explicit DeviceWeights(const gguf::GgufFile& file);
  struct Buffers;  // the device allocations (device_weights.cc)

  std::vector<compute::WeightView> views_;  // by tensor id; data == nullptr: not uploaded
  std::unique_ptr<Buffers> buffers_;
  uint64_t device_bytes_ = 0;
};

}  // namespace hypura::tiers
