// DeviceWeights: every weight of a model in GPU memory, uploaded once at load (part 1 of
// the GPU tier: a model that fits the GPU runs there entirely).
//
// upload() walks the model's tensor directory layer by layer, acquires each layer's
// tensors from a host provider (the resident weights the planner loaded), copies them to
// device memory taken with cudaMalloc (one allocation per tensor, never managed memory)
// and releases the layer. Afterwards acquire() and acquire_experts() are pointer
// arithmetic over device views (AddressableProvider) for model::CudaBlocks.
//
// read() instead takes a chosen set of tensors straight from the file (a model split
// between the GPU and the host tiers).
//
// Out of memory is kResourceExhausted naming the tensor and the sizes; everything taken
// so far is freed. Without a CUDA build upload() returns kUnsupported.
//
// Thread-safety: upload() once; afterwards read-only.
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

  // REQUIRES: file outlives the provider; host serves every tensor of `weights`.
  static Result<std::unique_ptr<DeviceWeights>> upload(const gguf::GgufFile& file,
                                                       const model::WeightMap& weights,
                                                       model::WeightProvider& host,
                                                       const Progress& progress = nullptr);
  // The tensors with wanted[id] read straight from the model file into device memory, in
  // chunks through one pinned staging buffer (storage -> pinned RAM -> GPU): the host keeps
  // no copy. For the GPU's share of a model split between tiers (scheduler::GpuSplit).
  // kInvalidArgument when wanted does not cover the file's tensors; a failed read names the
  // tensor and the file.
  static Result<std::unique_ptr<DeviceWeights>> read(const gguf::GgufFile& file,
                                                     const std::vector<bool>& wanted,
                                                     const Progress& progress = nullptr);
  ~DeviceWeights() override;

  std::string name() const override { return "cuda-resident"; }
  compute::WeightView view(model::TensorId id) const override;
  uint64_t device_bytes() const { return device_bytes_; }

 private:
  explicit DeviceWeights(const gguf::GgufFile& file);
  struct Buffers;  // the device allocations (device_weights.cc)

  std::vector<compute::WeightView> views_;  // by tensor id; data == nullptr: not uploaded
  std::unique_ptr<Buffers> buffers_;
  uint64_t device_bytes_ = 0;
};

}  // namespace hypura::tiers
