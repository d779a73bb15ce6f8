// KV cache: keys and values of every past position, per layer, in F16 (default) or F32.
//
// Layout per layer: K (n_ctx, n_head_kv * head_dim) and V (n_ctx, n_head_kv * head_dim_v),
// row-major, one row per position. Multi-head latent attention (deepseek2) stores only K:
// (n_ctx, kv_lora_rank + n_rot), the normalized latent then the rotated k_pe; its values
// are the latent, read as the first head_dim_v columns of the same rows
// (HParams::kv_per_token). A row is written once when its token is processed;
// attention widens rows back to F32 (compute::Context::widen_rows, exact), so a token's
// own key is read back rounded exactly like every earlier key and the result does not
// depend on how the prompt was split into batches.
//
// Storage is host memory, or for layers from first_device_layer() on F16 rows in the memory
// of the current CUDA device, taken with cudaMalloc: the GPU forward pass (cuda_blocks.h)
// writes and reads those rows itself, and k_rows()/v_rows() of those layers return device
// pointers. A model split between the CPU and a GPU (the GPU computes the last layers)
// keeps each layer's rows where its attention runs.
//
// Thread-safety: one forward pass at a time; attention threads only read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "compute/compute.h"
#include "model/hparams.h"

namespace hypura::model {

class KvCache {
 public:
  KvCache(const HParams& hp, int64_t n_ctx, bool f32);
  // An F16 cache, zeroed, with layers first_device_layer.. in device memory (0: all) and
  // the ones before in host memory. kResourceExhausted (with the sizes) when the device
  // lacks the memory; kUnsupported in a build without CUDA.
  // mirror: the host layers have device rows too, so that the GPU may compute them for a
  // prompt (the weights copied over the bus, model.h "wide stages"); mirror_to_device /
  // mirror_to_host keep the two copies in step.
  static Result<std::unique_ptr<KvCache>> on_device(const HParams& hp, int64_t n_ctx,
                                                    int64_t first_device_layer = 0,
                                                    bool mirror = false);
  ~KvCache();
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;

  int64_t n_ctx() const { return n_ctx_; }
  bool is_f32() const { return f32_; }
  bool on_device() const { return device_ != nullptr; }  // some layer is in device memory
  // Where layer il's rows are: device rows for the GPU, host rows for the CPU (a mirrored
  // host layer has both).
  bool on_device(int64_t il) const {
    return device_ != nullptr && (il >= first_device_ || mirror_);
  }
  bool on_host(int64_t il) const { return il < first_device_layer(); }
  int64_t first_device_layer() const { return device_ ? first_device_ : n_layer_; }
  bool mirrored() const { return mirror_; }

  // Mirrored host layers: the CPU wrote their rows from position `first` on (a step on the
  // CPU), so the device copy is stale from there.
  void host_rows_written(int64_t first) { mirror_synced_ = std::min(mirror_synced_, first); }
  // Before the GPU computes the host layers at positions from `end` on: their rows before
  // `end` copied to the device where stale. After: rows [begin, end) copied back to the
  // host. Synchronous. No-ops without a mirror.
  Status mirror_to_device(int64_t end);
  Status mirror_to_host(int64_t begin, int64_t end);
  uint64_t bytes() const;  // memory held by K and V of all layers
  // Makes room for n_ctx positions, keeping the rows stored so far. REQUIRES: n_ctx >= n_ctx().
  // Fails only on a device cache that cannot get the memory (then it is unchanged).
  Status grow(int64_t n_ctx);

  // Stores n_tokens rows starting at position pos. k: (n_tokens, k_width), v: (n_tokens,
  // v_width). REQUIRES: pos + n_tokens <= n_ctx, !on_device(il).
  void store(int64_t il, int64_t pos, int64_t n_tokens, const float* k, const float* v);

  // After a draft tree's verification (seq_rows.h): the kept branch's nodes, in slots
  // base + nodes[i], move to slots base + i, so the cache holds the branch as if it had
  // been decoded token by token. nodes[0] must be 0 and the nodes increasing (a branch).
  // Host rows move in memory, device rows by one copy per moved row over every device
  // layer (synchronous: after the pass). Fails only on a device error.
  Status keep_branch(int64_t base, std::span<const int32_t> nodes);

  // Head `h` of layer il from position `first` on: head_dim (keys) or head_dim_v (values)
  // elements per row, in host memory for a host layer. REQUIRES: first < n_ctx.
  compute::KvRows k_rows(int64_t il, int64_t h, int64_t first) const;
  compute::KvRows v_rows(int64_t il, int64_t h, int64_t first) const;
  // Layer il's device rows (position 0, head 0). REQUIRES: on_device(il).
  // The device allocation (changes when the cache grows; null: no device rows): what a
  // captured GPU step that reads and writes this cache depends on.
  const void* device_storage() const;
  void* device_k(int64_t il) const { return dev_k_[static_cast<size_t>(il)]; }
  void* device_v(int64_t il) const { return dev_v_[static_cast<size_t>(il)]; }

 private:
  struct Device;                              // the device buffers (kv_cache.cc)
  KvCache(const HParams& hp, int64_t n_ctx);  // device: storage set by on_device()
  void store_rows(uint8_t* dst, int64_t width, int64_t pos, int64_t n_tokens, const float* src);
  compute::KvRows rows(const uint8_t* base, int64_t width, int64_t col, int64_t first) const;
  void allocate_host(int64_t n_layers, int64_t n_ctx);  // layers [0, n_layers), kept rows
  void point_at_host();
  Status grow_device(int64_t n_ctx);
  Status copy_host_layers(int64_t from, int64_t to, bool to_device);
  Status move_device_row(int64_t from, int64_t to);

  int64_t n_ctx_;
  bool f32_;
  int64_t n_layer_;
  int64_t k_width_;  // n_head_kv * head_dim
  int64_t v_width_;  // n_head_kv * head_dim_v; 0 for MLA (values read from K)
  int64_t head_dim_;
  int64_t head_dim_v_;
  int64_t first_device_ = 0;               // with device_: layers from here on are there
  bool mirror_ = false;                    // the host layers have device rows too
  int64_t mirror_synced_ = 0;              // host layers' device rows equal the host's before this
  std::vector<std::vector<uint8_t>> k_;    // [host layers] (n_ctx, k_width) F16 or F32, host
  std::vector<std::vector<uint8_t>> v_;    // [host layers] (n_ctx, v_width) F16 or F32, host
  std::unique_ptr<Device> device_;         // device storage of layers first_device_..
  std::vector<uint8_t*> k_base_, v_base_;  // [n_layer] where each layer's rows are
  std::vector<uint8_t*> dev_k_, dev_v_;    // [n_layer] device rows (null: none)
};

}  // namespace hypura::model
