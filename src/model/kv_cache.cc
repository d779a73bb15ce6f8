#include "model/kv_cache.h"

#include <cassert>
#include <cstring>

#include "quant/fp16.h"

namespace hypura::model {

KvCache::KvCache(const HParams& hp, int64_t n_ctx, bool f32)
    : n_ctx_(n_ctx),
      f32_(f32),
      k_width_(hp.k_width()),
      v_width_(hp.v_width()),
      head_dim_(hp.head_dim),
      head_dim_v_(hp.head_dim_v) {
  const size_t elem = f32 ? 4 : 2;
  k_.resize(static_cast<size_t>(hp.n_layer));
  v_.resize(static_cast<size_t>(hp.n_layer));
  for (auto& k : k_) k.assign(static_cast<size_t>(n_ctx * k_width_) * elem, 0);
  for (auto& v : v_) v.assign(static_cast<size_t>(n_ctx * v_width_) * elem, 0);
}

uint64_t KvCache::bytes() const {
  uint64_t total = 0;
  for (const auto& k : k_) total += k.size();
  for (const auto& v : v_) total += v.size();
  return total;
}

void KvCache::grow(int64_t n_ctx) {
  assert(n_ctx >= n_ctx_);
  const size_t elem = f32_ ? 4 : 2;
  // Rows are position-major, so the stored positions stay where they are.
  for (auto& k : k_) k.resize(static_cast<size_t>(n_ctx * k_width_) * elem, 0);
  for (auto& v : v_) v.resize(static_cast<size_t>(n_ctx * v_width_) * elem, 0);
  n_ctx_ = n_ctx;
}

void KvCache::store(int64_t il, int64_t pos, int64_t n_tokens, const float* k, const float* v) {
  assert(pos >= 0 && pos + n_tokens <= n_ctx_);
  store_rows(k_[il], k_width_, pos, n_tokens, k);
  store_rows(v_[il], v_width_, pos, n_tokens, v);
}

void KvCache::store_rows(std::vector<uint8_t>& dst, int64_t width, int64_t pos,
                         int64_t n_tokens, const float* src) {
  const int64_t n = n_tokens * width;
  if (f32_) {
    std::memcpy(dst.data() + pos * width * 4, src, static_cast<size_t>(n) * 4);
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(dst.data()) + pos * width;
  for (int64_t i = 0; i < n; ++i) out[i] = quant::f32_to_fp16(src[i]);
}

compute::KvRows KvCache::rows(const std::vector<uint8_t>& src, int64_t width, int64_t col,
                              int64_t first) const {
  assert(first >= 0 && first < n_ctx_);
  const size_t elem = f32_ ? 4 : 2;
  return compute::KvRows{src.data() + static_cast<size_t>(first * width + col) * elem, width, !f32_};
}

compute::KvRows KvCache::k_rows(int64_t il, int64_t h, int64_t first) const {
  return rows(k_[il], k_width_, h * head_dim_, first);
}

compute::KvRows KvCache::v_rows(int64_t il, int64_t h, int64_t first) const {
  return rows(v_[il], v_width_, h * head_dim_v_, first);
}

}  // namespace hypura::model
