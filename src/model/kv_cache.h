// KV cache: keys and values of every past position, per layer, in F16 (default) or F32.
//
// Layout per layer: K (n_ctx, n_head_kv * head_dim) and V (n_ctx, n_head_kv * head_dim_v),
// row-major, one row per position. A row is written once when its token is processed;
// attention widens rows back to F32 (compute::Context::widen_rows, exact), so a token's
// own key is read back rounded exactly like every earlier key and the result does not
// depend on how the prompt was split into batches.
//
// Thread-safety: one forward pass at a time; attention threads only read.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "compute/compute.h"
#include "model/hparams.h"

namespace hypura::model {

class KvCache {
 public:
  KvCache(const HParams& hp, int64_t n_ctx, bool f32);

  int64_t n_ctx() const { return n_ctx_; }
  bool is_f32() const { return f32_; }
  uint64_t bytes() const;  // memory held by K and V of all layers
  // Makes room for n_ctx positions, keeping the rows stored so far. REQUIRES: n_ctx >= n_ctx().
  void grow(int64_t n_ctx);

  // Stores n_tokens rows starting at position pos. k: (n_tokens, k_width), v: (n_tokens,
  // v_width). REQUIRES: pos + n_tokens <= n_ctx.
  void store(int64_t il, int64_t pos, int64_t n_tokens, const float* k, const float* v);

  // Head `h` of layer il from position `first` on: head_dim (keys) or head_dim_v (values)
  // elements per row. REQUIRES: first < n_ctx.
  compute::KvRows k_rows(int64_t il, int64_t h, int64_t first) const;
  compute::KvRows v_rows(int64_t il, int64_t h, int64_t first) const;

 private:
  void store_rows(std::vector<uint8_t>& dst, int64_t width, int64_t pos, int64_t n_tokens,
                  const float* src);
  compute::KvRows rows(const std::vector<uint8_t>& src, int64_t width, int64_t col,
                       int64_t first) const;

  int64_t n_ctx_;
  bool f32_;
  int64_t k_width_;   // n_head_kv * head_dim
  int64_t v_width_;   // n_head_kv * head_dim_v
  int64_t head_dim_;
  int64_t head_dim_v_;
  std::vector<std::vector<uint8_t>> k_;  // [n_layer] (n_ctx, k_width) F16 or F32
  std::vector<std::vector<uint8_t>> v_;  // [n_layer] (n_ctx, v_width) F16 or F32
};

}  // namespace hypura::model
