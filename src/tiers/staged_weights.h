// StagedWeights: device views of every weight of a model split between the CPU and the
// GPU, for a pass in which the GPU computes all the layers (a prompt batch: a few
// milliseconds of bus copy per host layer beat the CPU computing it for hundreds of rows;
// model.h, "wide stages").
//
//   tensors the GPU holds, the head  views of DeviceWeights (pointer arithmetic)
//   a host layer L                   acquire(L) acquires L's host tensors (those of a layer
//                                    before first_device_layer, or that DeviceWeights does
//                                    not hold: an expert split's routed experts) from the
//                                    host provider (RAM, or a streaming pool slot) and
//                                    copies them into one device slot sized for the largest
//                                    host layer; experts are copied as whole stacked tensors
//                                    on their first request; release(L) releases the layer
//
// The copies are synchronous and the slot is reused layer after layer, so acquire waits
// for the device to finish the previous layer first: no copy overlaps compute yet (the
// next step: two slots and a copy stream with events, docs/GPU.md).
//
// Thread-safety: one forward pass at a time, from one thread (the CUDA device current).
// Ownership: the host provider and DeviceWeights must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/weight_provider.h"
#include "model/weights.h"
#include "tiers/device_weights.h"

namespace hypura::tiers {

class StagedWeights final : public model::WeightProvider {
 public:
  // Layers [0, first_device_layer) come from `host`, the rest and layer -1 from `device`,
  // but for the layer tensors `device` does not hold (DeviceWeights::holds), also staged.
  // kResourceExhausted when the device has no room for the slot; kUnsupported without CUDA.
  // pin: the host memory the host layers' resident tensors are in (may be empty), page-
  // locked while the provider lives so that their copies run at the bus's DMA rate (the
  // pageable path, staged through the driver's buffer, is far slower; docs/GPU.md);
  // when the OS refuses to lock it, copies stay pageable (logged).
  static Result<std::unique_ptr<StagedWeights>> create(
      const gguf::GgufFile& file, const model::WeightMap& weights, model::WeightProvider& host,
      DeviceWeights& device, int64_t first_device_layer, std::span<uint8_t> pin = {});
  ~StagedWeights() override;

  // Nothing: the host provider's pass is begun by the CPU stage every layer split has (it
  // embeds the tokens: the embedding is on the GPU only when every layer is), and would
  // count twice; an expert split's host is resident (scheduler::place), with no pass.
  Status begin_pass() override { return Status::ok(); }
  Status acquire(int layer, std::span<const model::TensorId> ids,
                 std::span<compute::WeightView> out) override;
  Status acquire_experts(int layer, std::span<const model::ExpertRequest> requests,
                         std::span<compute::WeightView> out) override;
  void release(int layer) override;
  uint64_t bytes_read() const override { return host_.bytes_read(); }
  std::string name() const override { return "staged(" + host_.name() + " -> gpu)"; }

  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t bytes_copied() const { return bytes_copied_; }  // host -> device, all passes

 private:
  StagedWeights(const gguf::GgufFile& file, model::WeightProvider& host, DeviceWeights& device,
                int64_t first_device_layer);
  // Whether tensor `id` of `layer` is copied from the host rather than held by the device.
  bool staged_tensor(int layer, model::TensorId id) const {
    return layer < first_device_ || !device_.holds(id);
  }
  // Whether `layer` has staged tensors.
  bool host_layer(int layer) const {
    return layer >= 0 && static_cast<size_t>(layer) < host_layer_.size() && host_layer_[layer];
  }
  // Tensor `id` of host layer `layer` in the slot (copied on first use this layer).
  Status stage(int layer, model::TensorId id, compute::WeightView* out);
  Status start_layer(int layer);

  struct Slot;  // the device allocation (staged_weights.cc)
  const gguf::GgufFile& file_;
  model::WeightProvider& host_;
  DeviceWeights& device_;
  int64_t first_device_;
  std::vector<bool> host_layer_;  // (n_layer) layers with staged tensors
  uint64_t slot_bytes_ = 0;
  std::unique_ptr<Slot> slot_;
  int layer_ = -2;                       // the host layer the slot holds (-2: none)
  uint64_t used_ = 0;                    // bytes of the slot filled for layer_
  std::vector<uint64_t> offset_;         // (n_tensors) where each staged tensor is; ~0: not staged
  std::vector<model::TensorId> staged_;  // ids staged for layer_
  bool host_acquired_ = false;           // layer_ is acquired from the host provider
  uint64_t bytes_copied_ = 0;
};

}  // namespace hypura::tiers
