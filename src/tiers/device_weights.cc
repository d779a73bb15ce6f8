#include "tiers/device_weights.h"

#include <algorithm>
#include <cassert>
#include <fstream>
#include <string>

#if HYPURA_HAVE_CUDA
#include "compute/cuda/device.h"
#endif

namespace hypura::tiers {

#if HYPURA_HAVE_CUDA
struct DeviceWeights::Buffers {
  std::vector<compute::cuda::DeviceBuffer> held;
};
#else
struct DeviceWeights::Buffers {};
#endif

DeviceWeights::DeviceWeights(const gguf::GgufFile& file) : AddressableProvider(file) {}
DeviceWeights::~DeviceWeights() = default;

compute::WeightView DeviceWeights::view(model::TensorId id) const {
  assert(id >= 0 && static_cast<size_t>(id) < views_.size() && views_[id].data != nullptr);
  return views_[static_cast<size_t>(id)];
}

Result<std::unique_ptr<DeviceWeights>> DeviceWeights::read(const gguf::GgufFile& file,
                                                           const std::vector<bool>& wanted,
                                                           const Progress& progress) {
  if (wanted.size() != file.tensors().size()) {
    return invalid_argument("device tensors cover " + std::to_string(wanted.size()) +
                            " tensors; the model has " + std::to_string(file.tensors().size()));
  }
#if HYPURA_HAVE_CUDA
  namespace cuda = compute::cuda;
  constexpr size_t kChunk = size_t{32} << 20;  // staging: large reads, little pinned memory
  std::unique_ptr<DeviceWeights> d(new DeviceWeights(file));
  d->views_.assign(file.tensors().size(), compute::WeightView{});
  d->buffers_ = std::make_unique<Buffers>();
  HYPURA_ASSIGN_OR_RETURN(cuda::PinnedBuffer staging, cuda::PinnedBuffer::allocate(kChunk));
  std::vector<std::ifstream> files;
  for (const std::string& path : file.paths()) files.emplace_back(path, std::ios::binary);
  uint64_t total = 0, done = 0;
  for (size_t id = 0; id < wanted.size(); ++id)
    total += wanted[id] ? file.tensors()[id].n_bytes : 0;
  for (size_t id = 0; id < wanted.size(); ++id) {
    if (!wanted[id]) continue;
    const gguf::TensorInfo& t = file.tensors()[id];
    auto allocated = cuda::DeviceBuffer::allocate(t.n_bytes);
    if (!allocated.is_ok())
      return allocated.status().with_context("reading '" + t.name + "' to the GPU");
    cuda::DeviceBuffer buf = std::move(allocated).value();
    std::ifstream& in = files[t.file_index];
    in.seekg(static_cast<std::streamoff>(t.offset));
    for (uint64_t at = 0; at < t.n_bytes; at += kChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, t.n_bytes - at));
      if (!in.read(staging.as<char>(), static_cast<std::streamsize>(n))) {
        return io_error("reading '" + t.name + "' from " + file.paths()[t.file_index] + " failed");
      }
      HYPURA_RETURN_IF_ERROR(
          cuda::copy_to_device(static_cast<uint8_t*>(buf.data()) + at, staging.data(), n));
      done += n;
      if (progress) progress(done, total);
    }
    d->views_[id] = tensor_view(t, static_cast<const uint8_t*>(buf.data()));
    d->device_bytes_ += t.n_bytes;
    d->buffers_->held.push_back(std::move(buf));
  }
  return d;
#else
  (void)progress;
  return unsupported("this build has no CUDA backend (HYPURA_CUDA)");
#endif
}

}  // namespace hypura::tiers
