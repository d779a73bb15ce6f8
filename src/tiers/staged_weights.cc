#include "tiers/staged_weights.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <string>

#include "tiers/tensor_view.h"

#if HYPURA_HAVE_CUDA
#include "compute/cuda/device.h"
#endif

namespace hypura::tiers {
namespace {

constexpr uint64_t kNotStaged = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kSlotAlign = 256;  // device loads of every block format stay aligned

[[maybe_unused]] uint64_t align_up(uint64_t n) {  // unused without CUDA
  return (n + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
}

}  // namespace

#if HYPURA_HAVE_CUDA
struct StagedWeights::Slot {
  compute::cuda::DeviceBuffer buffer;
  compute::cuda::HostRegistration pinned;  // the host layers' resident memory
};
#else
struct StagedWeights::Slot {};
#endif

StagedWeights::StagedWeights(const gguf::GgufFile& file, model::WeightProvider& host,
                             DeviceWeights& device, int64_t first_device_layer)
    : file_(file),
      host_(host),
      device_(device),
      first_device_(first_device_layer),
      offset_(file.tensors().size(), kNotStaged) {}

StagedWeights::~StagedWeights() {
  if (host_acquired_) host_.release(layer_);
}

Result<std::unique_ptr<StagedWeights>> StagedWeights::create(
    const gguf::GgufFile& file, const model::WeightMap& weights, model::WeightProvider& host,
    DeviceWeights& device, int64_t first_device_layer, std::span<uint8_t> pin) {
#if HYPURA_HAVE_CUDA
  std::unique_ptr<StagedWeights> w(new StagedWeights(file, host, device, first_device_layer));
  w->host_layer_.assign(weights.layers.size(), false);
  for (size_t il = 0; il < weights.layers.size(); ++il) {
    uint64_t bytes = 0;
    for (model::TensorId id : model::layer_tensor_ids(weights, static_cast<int64_t>(il))) {
      if (!w->staged_tensor(static_cast<int>(il), id)) continue;
      bytes += align_up(file.tensors()[id].n_bytes);
      w->host_layer_[il] = true;
    }
    w->slot_bytes_ = std::max(w->slot_bytes_, bytes);
  }
  w->slot_ = std::make_unique<Slot>();
  if (w->slot_bytes_ > 0) {
    auto buf = compute::cuda::DeviceBuffer::allocate(w->slot_bytes_);
    if (!buf.is_ok())
      return buf.status().with_context("the GPU's slot for the host layers' weights");
    w->slot_->buffer = std::move(buf).value();
  }
  if (auto pinned = compute::cuda::HostRegistration::pin(pin.data(), pin.size()); pinned.is_ok()) {
    w->slot_->pinned = std::move(pinned).value();
  } else {
    spdlog::warn("{}: the host layers' copies to the GPU stay pageable (slower)",
                 pinned.status().message());
  }
  return w;
#else
  (void)file, (void)weights, (void)host, (void)device, (void)first_device_layer, (void)pin;
  return unsupported("this build has no CUDA backend (HYPURA_CUDA)");
#endif
}

// The slot goes to `layer`: the device must be done with the previous one (its kernels
// read the slot), and the host provider gets the previous layer back.
Status StagedWeights::start_layer(int layer) {
  if (layer == layer_) return Status::ok();
#if HYPURA_HAVE_CUDA
  HYPURA_RETURN_IF_ERROR(compute::cuda::synchronize_device());
#endif
  if (host_acquired_) host_.release(layer_);
  host_acquired_ = false;
  for (model::TensorId id : staged_) offset_[static_cast<size_t>(id)] = kNotStaged;
  staged_.clear();
  layer_ = layer;
  used_ = 0;
  return Status::ok();
}

Status StagedWeights::stage(int layer, model::TensorId id, compute::WeightView* out) {
  const gguf::TensorInfo& t = file_.tensors()[static_cast<size_t>(id)];
  if (offset_[static_cast<size_t>(id)] == kNotStaged) {
#if HYPURA_HAVE_CUDA
    compute::WeightView host_view;
    HYPURA_RETURN_IF_ERROR(host_.acquire(layer, std::span(&id, 1), std::span(&host_view, 1)));
    host_acquired_ = true;
    if (used_ + t.n_bytes > slot_bytes_) {
      return resource_exhausted("'" + t.name + "' does not fit the GPU's staging slot of " +
                                std::to_string(slot_bytes_) + " bytes");
    }
    auto* dst = static_cast<uint8_t*>(slot_->buffer.data()) + used_;
    HYPURA_RETURN_IF_ERROR(compute::cuda::copy_to_device(dst, host_view.data, t.n_bytes));
    offset_[static_cast<size_t>(id)] = used_;
    staged_.push_back(id);
    used_ += align_up(t.n_bytes);
    bytes_copied_ += t.n_bytes;
#else
    (void)layer;
    (void)t;
    return unsupported("this build has no CUDA backend (HYPURA_CUDA)");
#endif
  }
#if HYPURA_HAVE_CUDA
  *out = tensor_view(
      t, static_cast<const uint8_t*>(slot_->buffer.data()) + offset_[static_cast<size_t>(id)]);
#endif
  return Status::ok();
}

// A host layer's tensors staged one by one (each acquire of the host provider returns
// views valid until its release), then the device waits for the copies: a pageable copy
// may return before its transfer ends. An acquire that stages nothing (a device layer, or
// an expert split's attention) is pointer arithmetic and never waits: a decode pass of the
// same GPU blocks goes through this provider while its CUDA graph is being captured.
Status StagedWeights::acquire(int layer, std::span<const model::TensorId> ids,
                              std::span<compute::WeightView> out) {
  const bool stages_any = host_layer(layer) &&
                          std::any_of(ids.begin(), ids.end(),
                                      [&](model::TensorId id) { return staged_tensor(layer, id); });
  if (!stages_any) return device_.acquire(layer, ids, out);
  HYPURA_RETURN_IF_ERROR(start_layer(layer));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (staged_tensor(layer, ids[i])) {
      HYPURA_RETURN_IF_ERROR(stage(layer, ids[i], &out[i]));
    } else {
      HYPURA_RETURN_IF_ERROR(device_.acquire(layer, ids.subspan(i, 1), out.subspan(i, 1)));
    }
  }
#if HYPURA_HAVE_CUDA
  HYPURA_RETURN_IF_ERROR(compute::cuda::synchronize_device());
#endif
  return Status::ok();
}

Status StagedWeights::acquire_experts(int layer, std::span<const model::ExpertRequest> requests,
                                      std::span<compute::WeightView> out) {
  if (!host_layer(layer)) return device_.acquire_experts(layer, requests, out);
  HYPURA_RETURN_IF_ERROR(start_layer(layer));
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!staged_tensor(layer, requests[i].tensor)) {
      HYPURA_RETURN_IF_ERROR(
          device_.acquire_experts(layer, requests.subspan(i, 1), out.subspan(i, 1)));
      continue;
    }
    compute::WeightView whole;
    HYPURA_RETURN_IF_ERROR(stage(layer, requests[i].tensor, &whole));
    out[i] = expert_view(file_.tensors()[static_cast<size_t>(requests[i].tensor)], whole,
                         requests[i].expert);
  }
#if HYPURA_HAVE_CUDA
  HYPURA_RETURN_IF_ERROR(compute::cuda::synchronize_device());
#endif
  return Status::ok();
}

// The slot stays with its layer until the next one starts (start_layer), when the device
// is known to be done with it; the host provider's release waits until then too, or until
// the pass ends (release(-1), after the blocks' finish() synchronized), so no host layer
// stays held between passes.
void StagedWeights::release(int layer) {
  if (layer < 0 && layer_ != -2) (void)start_layer(-2);
  if (!host_layer(layer)) device_.release(layer);
}

}  // namespace hypura::tiers
