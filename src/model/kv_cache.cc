#include "model/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <tuple>
#include <utility>

#include "quant/fp16.h"

#if HYPURA_HAVE_CUDA
#include "compute/cuda/device.h"
#endif

namespace hypura::model {

#if HYPURA_HAVE_CUDA
// One buffer for all layers, layer il's K at k_offset(il) and V after all keys.
struct KvCache::Device {
  compute::cuda::DeviceBuffer buffer;
};
#else
struct KvCache::Device {};
#endif

KvCache::KvCache(const HParams& hp, int64_t n_ctx)
    : n_ctx_(n_ctx),
      f32_(false),
      n_layer_(hp.n_layer),
      k_width_(hp.k_width()),
      v_width_(hp.is_mla() ? 0 : hp.v_width()),  // MLA: values are the keys' latent prefix
      head_dim_(hp.head_dim),
      head_dim_v_(hp.head_dim_v) {}

KvCache::KvCache(const HParams& hp, int64_t n_ctx, bool f32) : KvCache(hp, n_ctx) {
  f32_ = f32;
  allocate_host(n_layer_, n_ctx);
}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

// Rows are position-major, so growing keeps the stored positions where they are.
void KvCache::allocate_host(int64_t n_layers, int64_t n_ctx) {
  const size_t elem = f32_ ? 4 : 2;
  k_.resize(static_cast<size_t>(n_layers));
  v_.resize(static_cast<size_t>(n_layers));
  for (auto& k : k_) k.resize(static_cast<size_t>(n_ctx * k_width_) * elem, 0);
  for (auto& v : v_) v.resize(static_cast<size_t>(n_ctx * v_width_) * elem, 0);
  point_at_host();
}

void KvCache::point_at_host() {
  k_base_.resize(static_cast<size_t>(n_layer_), nullptr);
  v_base_.resize(static_cast<size_t>(n_layer_), nullptr);
  for (size_t il = 0; il < k_.size(); ++il) {
    k_base_[il] = k_[il].data();
    v_base_[il] = v_[il].data();
  }
}

#if HYPURA_HAVE_CUDA
namespace {

// Device layout for n_ctx positions: K of every layer, then V of every layer.
struct DeviceLayout {
  size_t k_layer, v_layer, total;
};
DeviceLayout device_layout(int64_t n_layer, int64_t n_ctx, int64_t k_width, int64_t v_width) {
  DeviceLayout l;
  l.k_layer = static_cast<size_t>(n_ctx * k_width) * 2;
  l.v_layer = static_cast<size_t>(n_ctx * v_width) * 2;
  l.total = static_cast<size_t>(n_layer) * (l.k_layer + l.v_layer);
  return l;
}

}  // namespace

Result<std::unique_ptr<KvCache>> KvCache::on_device(const HParams& hp, int64_t n_ctx,
                                                    int64_t first_device_layer, bool mirror) {
  std::unique_ptr<KvCache> kv(new KvCache(hp, n_ctx));
  kv->first_device_ = std::clamp<int64_t>(first_device_layer, 0, hp.n_layer);
  kv->mirror_ = mirror && kv->first_device_ > 0;
  kv->allocate_host(kv->first_device_, n_ctx);
  kv->device_ = std::make_unique<Device>();
  HYPURA_RETURN_IF_ERROR(kv->grow_device(n_ctx).with_context("KV cache"));
  return kv;
}

// The device layers' rows for n_ctx positions in one new buffer, zeroed so that a never-
// written row widens to zeros (as the host cache), then the rows kept: each layer's n_ctx_
// old rows at the start of its new, longer run.
Status KvCache::grow_device(int64_t n_ctx) {
  namespace cuda = compute::cuda;
  const int64_t first = mirror_ ? 0 : first_device_;  // the first layer with device rows
  const int64_t n_dev = n_layer_ - first;
  const DeviceLayout to = device_layout(n_dev, n_ctx, k_width_, v_width_);
  if (to.total == 0) return Status::ok();
  HYPURA_ASSIGN_OR_RETURN(cuda::DeviceBuffer grown, cuda::DeviceBuffer::allocate(to.total));
  HYPURA_RETURN_IF_ERROR(cuda::zero_device(grown.data(), to.total));
  std::vector<uint8_t*> dev_k(static_cast<size_t>(n_layer_), nullptr), dev_v(dev_k);
  auto* base = static_cast<uint8_t*>(grown.data());
  for (int64_t d = 0; d < n_dev; ++d) {
    const size_t il = static_cast<size_t>(first + d);
    dev_k[il] = base + static_cast<size_t>(d) * to.k_layer;
    dev_v[il] =
        base + static_cast<size_t>(n_dev) * to.k_layer + static_cast<size_t>(d) * to.v_layer;
  }
  if (device_->buffer.data() != nullptr) {
    const DeviceLayout from = device_layout(n_dev, n_ctx_, k_width_, v_width_);
    for (int64_t il = first; il < n_layer_; ++il) {
      HYPURA_RETURN_IF_ERROR(cuda::copy_device_to_device(dev_k[il], dev_k_[il], from.k_layer));
      HYPURA_RETURN_IF_ERROR(cuda::copy_device_to_device(dev_v[il], dev_v_[il], from.v_layer));
    }
  }
  device_->buffer = std::move(grown);
  dev_k_ = std::move(dev_k);
  dev_v_ = std::move(dev_v);
  for (int64_t il = first_device_; il < n_layer_; ++il) {
    k_base_[static_cast<size_t>(il)] = dev_k_[static_cast<size_t>(il)];
    v_base_[static_cast<size_t>(il)] = dev_v_[static_cast<size_t>(il)];
  }
  return Status::ok();
}

// Slot `from`'s row of every layer with device rows, copied to slot `to`: the layers' K
// (and V) runs are evenly spaced in the buffer, so one 2D copy takes each.
Status KvCache::move_device_row(int64_t from, int64_t to) {
  namespace cuda = compute::cuda;
  const int64_t first = mirror_ ? 0 : first_device_;
  const int64_t n_dev = n_layer_ - first;
  if (!device_ || n_dev == 0) return Status::ok();
  const DeviceLayout l = device_layout(n_dev, n_ctx_, k_width_, v_width_);
  const auto f = static_cast<size_t>(first);
  for (const auto& [layer0, width, pitch] :
       {std::tuple{dev_k_[f], k_width_, l.k_layer}, std::tuple{dev_v_[f], v_width_, l.v_layer}}) {
    if (width == 0) continue;  // MLA keeps no V rows
    const size_t row = static_cast<size_t>(width) * 2;
    HYPURA_RETURN_IF_ERROR(cuda::copy_device_to_device_2d(layer0 + static_cast<size_t>(to) * row,
                                                          layer0 + static_cast<size_t>(from) * row,
                                                          row, static_cast<size_t>(n_dev), pitch));
  }
  return Status::ok();
}

// Rows [from, to) of every host layer, copied between its host and device storage.
Status KvCache::copy_host_layers(int64_t from, int64_t to, bool to_device) {
  namespace cuda = compute::cuda;
  if (!mirror_ || to <= from) return Status::ok();
  const size_t elem = 2;
  for (int64_t il = 0; il < first_device_; ++il) {
    const auto i = static_cast<size_t>(il);
    for (const auto& [host, dev, width] : {std::tuple{k_base_[i], dev_k_[i], k_width_},
                                           std::tuple{v_base_[i], dev_v_[i], v_width_}}) {
      const size_t off = static_cast<size_t>(from * width) * elem,
                   n = static_cast<size_t>((to - from) * width) * elem;
      HYPURA_RETURN_IF_ERROR(to_device ? cuda::copy_to_device(dev + off, host + off, n)
                                       : cuda::copy_to_host(host + off, dev + off, n));
    }
  }
  return Status::ok();
}

Status KvCache::mirror_to_device(int64_t end) {
  if (!mirror_ || end <= mirror_synced_) return Status::ok();
  HYPURA_RETURN_IF_ERROR(copy_host_layers(mirror_synced_, end, true));
  mirror_synced_ = end;
  return Status::ok();
}

Status KvCache::mirror_to_host(int64_t begin, int64_t end) {
  if (!mirror_) return Status::ok();
  HYPURA_RETURN_IF_ERROR(copy_host_layers(begin, end, false));
  if (begin <= mirror_synced_) mirror_synced_ = std::max(mirror_synced_, end);
  return Status::ok();
}
const void* KvCache::device_storage() const {
  return device_ ? device_->buffer.data() : nullptr;
}
#else
const void* KvCache::device_storage() const {
  return nullptr;
}

Result<std::unique_ptr<KvCache>> KvCache::on_device(const HParams&, int64_t, int64_t, bool) {
  return unsupported("a device KV cache needs a build with CUDA (HYPURA_CUDA)");
}

Status KvCache::mirror_to_device(int64_t) {
  return Status::ok();
}
Status KvCache::mirror_to_host(int64_t, int64_t) {
  return Status::ok();
}

Status KvCache::grow_device(int64_t) {
  return unsupported("no CUDA in this build");
}

Status KvCache::move_device_row(int64_t, int64_t) {
  return Status::ok();  // no device rows
}
#endif

// The device part first: when it cannot get the memory, nothing has changed.
Status KvCache::grow(int64_t n_ctx) {
  assert(n_ctx >= n_ctx_);
  if (device_) HYPURA_RETURN_IF_ERROR(grow_device(n_ctx));
  allocate_host(static_cast<int64_t>(k_.size()), n_ctx);
  n_ctx_ = n_ctx;
  return Status::ok();
}

uint64_t KvCache::bytes() const {
  return static_cast<uint64_t>(n_layer_ * n_ctx_ * (k_width_ + v_width_)) * (f32_ ? 4 : 2);
}

void KvCache::store(int64_t il, int64_t pos, int64_t n_tokens, const float* k, const float* v) {
  assert(pos >= 0 && pos + n_tokens <= n_ctx_ && !on_device(il));
  store_rows(k_base_[il], k_width_, pos, n_tokens, k);
  store_rows(v_base_[il], v_width_, pos, n_tokens, v);
}

void KvCache::store_rows(uint8_t* dst, int64_t width, int64_t pos, int64_t n_tokens,
                         const float* src) {
  const int64_t n = n_tokens * width;
  if (n == 0) return;  // MLA keeps no V rows: its values are the latent's first columns
  if (f32_) {
    std::memcpy(dst + pos * width * 4, src, static_cast<size_t>(n) * 4);
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(dst) + pos * width;
  for (int64_t i = 0; i < n; ++i) out[i] = quant::f32_to_fp16(src[i]);
}

// Rows move in increasing order: row i's source, base + nodes[i] >= base + i, is never an
// earlier move's destination.
Status KvCache::keep_branch(int64_t base, std::span<const int32_t> nodes) {
  assert(nodes.empty() || nodes[0] == 0);
  const size_t elem = f32_ ? 4 : 2;
  for (size_t i = 1; i < nodes.size(); ++i) {
    const int64_t from = base + nodes[i], to = base + static_cast<int64_t>(i);
    assert(from >= to && from < n_ctx_);
    if (from == to) continue;
    for (int64_t il = 0; il < first_device_layer(); ++il) {
      for (const auto& [rows, width] :
           {std::pair{k_base_[il], k_width_}, std::pair{v_base_[il], v_width_}}) {
        if (width == 0) continue;  // MLA keeps no V rows
        const size_t row = static_cast<size_t>(width) * elem;
        std::memmove(rows + static_cast<size_t>(to) * row, rows + static_cast<size_t>(from) * row,
                     row);
      }
    }
    HYPURA_RETURN_IF_ERROR(move_device_row(from, to));
  }
  return Status::ok();
}

compute::KvRows KvCache::rows(const uint8_t* base, int64_t width, int64_t col,
                              int64_t first) const {
  assert(first >= 0 && first < n_ctx_);
  const size_t elem = f32_ ? 4 : 2;
  return compute::KvRows{base + static_cast<size_t>(first * width + col) * elem, width, !f32_};
}

compute::KvRows KvCache::k_rows(int64_t il, int64_t h, int64_t first) const {
  return rows(k_base_[il], k_width_, h * head_dim_, first);
}

compute::KvRows KvCache::v_rows(int64_t il, int64_t h, int64_t first) const {
  if (v_width_ == 0) return rows(k_base_[il], k_width_, 0, first);  // MLA: the latent
  return rows(v_base_[il], v_width_, h * head_dim_v_, first);
}

}  // namespace hypura::model
