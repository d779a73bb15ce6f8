#include "runtime/expert_cache.h"

#include <algorithm>
#include <cmath>

namespace hypura::runtime {

const char* cache_policy_name(CachePolicy policy) {
  switch (policy) {
    case CachePolicy::kLru: return "lru";
    case CachePolicy::kLfu: return "lfu";
    case CachePolicy::kAgedLfu: return "aged-lfu";
    case CachePolicy::kLayerAware: return "layer-aware";
    case CachePolicy::kAdaptive: return "adaptive";
  }
  return "?";
}

Result<CachePolicy> parse_cache_policy(const std::string& name) {
  for (CachePolicy p : {CachePolicy::kLru, CachePolicy::kLfu, CachePolicy::kAgedLfu, CachePolicy::kLayerAware,
                        CachePolicy::kAdaptive}) {
    if (name == cache_policy_name(p)) return p;
  }
  return invalid_argument("unknown cache policy '" + name + "' (lru, lfu, aged-lfu, layer-aware, adaptive)");
}

struct ExpertCache::Ghost {
  std::unique_ptr<ExpertCache> cache;
  double hits = 0;  // decayed: each access multiplies by the decay, a hit adds 1

  void access(int layer, int expert, double decay) {
    cache->set_layer(layer);
    const int slot = cache->lookup(layer, expert);
    hits = hits * decay + (slot >= 0 ? 1.0 : 0.0);
    if (slot >= 0) {
      cache->touch(slot);
    } else {
      cache->assign(cache->victim([](int) { return true; }), layer, expert);
    }
  }
};

ExpertCache::ExpertCache(uint32_t capacity, int n_layer, int n_expert, CachePolicy policy,
                         double half_life)
    : policy_(policy),
      n_expert_(n_expert),
      half_life_(half_life > 0 ? half_life : 8.0 * n_layer),
      n_layer_(n_layer),
      slots_(capacity),
      index_(static_cast<size_t>(n_layer) * n_expert, -1),
      following_(policy == CachePolicy::kAdaptive ? CachePolicy::kLayerAware : policy) {
  if (policy != CachePolicy::kAdaptive) return;
  for (CachePolicy rule : {CachePolicy::kLayerAware, CachePolicy::kLru}) {
    ghosts_.push_back(Ghost{std::make_unique<ExpertCache>(capacity, n_layer, n_expert, rule, half_life), 0.0});
  }
}

ExpertCache::~ExpertCache() = default;
ExpertCache::ExpertCache(ExpertCache&&) noexcept = default;
ExpertCache& ExpertCache::operator=(ExpertCache&&) noexcept = default;

void ExpertCache::set_layer(int layer) {
  current_layer_ = layer;
}

// One access of (layer, expert) by the owner: each ghost replays it, and the rule of the
// ghost with more recent hits is followed (layer-aware on ties: it is first).
void ExpertCache::observe(int layer, int expert) {
  if (ghosts_.empty()) return;
  const double decay = std::exp2(-1.0 / (4.0 * std::max<double>(capacity(), 16)));
  for (Ghost& g : ghosts_) g.access(layer, expert, decay);
  const Ghost* best = &ghosts_.front();
  for (const Ghost& g : ghosts_) {
    if (g.hits > best->hits) best = &g;
  }
  following_ = best->cache->policy();
}

double ExpertCache::value(const Entry& e) const {
  switch (following_) {
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
    case CachePolicy::kAdaptive: break;  // following_ is always a fixed rule
  }
  return 0;
}

void ExpertCache::touch(int slot) {
  Entry& e = slots_[slot];
  ++clock_;
  if (policy_ != CachePolicy::kLru && policy_ != CachePolicy::kLfu) {
    e.score = e.score * std::exp2(-static_cast<double>(clock_ - e.last) / half_life_) + 1.0;
  } else {
    e.score += 1.0;
  }
  e.last = clock_;
  observe(e.layer, e.expert);
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
