#include "runtime/expert_cache.h"

#include <cmath>

namespace hypura::runtime {

const char* cache_policy_name(CachePolicy policy) {
  switch (policy) {
    case CachePolicy::kLru: return "lru";
    case CachePolicy::kLfu: return "lfu";
    case CachePolicy::kAgedLfu: return "aged-lfu";
    case CachePolicy::kLayerAware: return "layer-aware";
  }
  return "?";
}

Result<CachePolicy> parse_cache_policy(const std::string& name) {
  for (CachePolicy p : {CachePolicy::kLru, CachePolicy::kLfu, CachePolicy::kAgedLfu, CachePolicy::kLayerAware}) {
    if (name == cache_policy_name(p)) return p;
  }
  return invalid_argument("unknown cache policy '" + name + "' (lru, lfu, aged-lfu, layer-aware)");
}

ExpertCache::ExpertCache(uint32_t capacity, int n_layer, int n_expert, CachePolicy policy,
                         double half_life)
    : policy_(policy),
      n_expert_(n_expert),
      half_life_(half_life > 0 ? half_life : 8.0 * n_layer),
      n_layer_(n_layer),
      slots_(capacity),
      index_(static_cast<size_t>(n_layer) * n_expert, -1) {}

double ExpertCache::value(const Entry& e) const {
  switch (policy_) {
    case CachePolicy::kLru: return static_cast<double>(e.last);
    case CachePolicy::kLfu: return e.score;
    case CachePolicy::kAgedLfu:
      return e.score * std::exp2(-static_cast<double>(clock_ - e.last) / half_life_);
    case CachePolicy::kLayerAware: {
      // Layers until the entry's layer is routed again: 1 for the next one, n_layer for
      // the current one (its batch is protected by the provider; next use: next token).
      const int distance = (e.layer - current_layer_ + n_layer_ - 1) % n_layer_ + 1;
      return e.score * std::exp2(-static_cast<double>(clock_ - e.last) / half_life_) / distance;
    }
  }
  return 0;
}

void ExpertCache::touch(int slot) {
  Entry& e = slots_[slot];
  ++clock_;
  if (policy_ == CachePolicy::kAgedLfu || policy_ == CachePolicy::kLayerAware) {
    e.score = e.score * std::exp2(-static_cast<double>(clock_ - e.last) / half_life_) + 1.0;
  } else {
    e.score += 1.0;
  }
  e.last = clock_;
}

int ExpertCache::victim(const std::function<bool(int)>& evictable) const {
  int best = -1;
  double best_value = 0;
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
    if (slots_[s].layer < 0) return s;
    if (!evictable(s)) continue;
    const double v = value(slots_[s]);
    // Lower value goes first; on ties the least recently used.
    if (best < 0 || v < best_value || (v == best_value && slots_[s].last < slots_[best].last)) {
      best = s;
      best_value = v;
    }
  }
  return best;
}

void ExpertCache::assign(int slot, int layer, int expert) {
  erase(slot);
  Entry& e = slots_[slot];
  e.layer = layer;
  e.expert = expert;
  e.score = 0;
  e.last = clock_;
  index_[static_cast<size_t>(layer) * n_expert_ + expert] = slot;
  touch(slot);
}

void ExpertCache::erase(int slot) {
  Entry& e = slots_[slot];
  if (e.layer >= 0) index_[static_cast<size_t>(e.layer) * n_expert_ + e.expert] = -1;
  e = Entry{};
}

}  // namespace hypura::runtime
