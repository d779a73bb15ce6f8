#include "experts/expert_cache.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

namespace hypura::experts {

const char* cache_policy_name(CachePolicy policy) {
  switch (policy) {
    case CachePolicy::kLru:
      return "lru";
    case CachePolicy::kLfu:
      return "lfu";
    case CachePolicy::kAgedLfu:
      return "aged-lfu";
    case CachePolicy::kLayerAware:
      return "layer-aware";
    case CachePolicy::kLearned:
      return "learned";
    case CachePolicy::kAdaptive:
      return "adaptive";
  }
  return "?";
}

Result<CachePolicy> parse_cache_policy(const std::string& name) {
  for (CachePolicy p : {CachePolicy::kLru, CachePolicy::kLfu, CachePolicy::kAgedLfu,
                        CachePolicy::kLayerAware, CachePolicy::kLearned, CachePolicy::kAdaptive}) {
    if (name == cache_policy_name(p)) return p;
  }
  return invalid_argument("unknown cache policy '" + name +
                          "' (lru, lfu, aged-lfu, layer-aware, learned, adaptive)");
}

// kLearned's model. Each key has a feature state: whether its layer's previous routing
// used it, how many of the 7 routings before that did (a bit mask of the last 8), and its
// aged frequency of use (half-life 128 routings of its layer) in half-octave buckets.
// For each of the 2 x 8 x 16 states it counts, over every key of each finished routing,
// how often a key in that state was used: the empirical probability of use at the next
// routing, learned from the stream alone. Sparse states borrow strength from coarser ones
// (previous; previous and recent).
class ExpertCache::Usage {
 public:
  Usage(int n_layer, int n_expert)
      : n_layer_(n_layer),
        n_expert_(n_expert),
        history_(static_cast<size_t>(n_layer) * n_expert, 0),
        freq_(history_.size(), 0.0f),
        next_state_(history_.size(), static_cast<uint8_t>(state(0, 0))),
        in_routing_(static_cast<size_t>(n_expert), 0) {
    refresh();
  }

  void begin(int layer) {
    if (routing_layer_ >= 0) finish();
    routing_layer_ = layer;
    const size_t base = static_cast<size_t>(layer) * n_expert_;
    for (int e = 0; e < n_expert_; ++e) {
      next_state_[base + e] =
          static_cast<uint8_t>(state(history_[base + e] << 1u, freq_[base + e] * kFreqDecay));
    }
  }
  void mark(int layer, int expert) {
    if (layer != routing_layer_ || in_routing_[expert]) return;
    in_routing_[expert] = 1;
    const size_t k = static_cast<size_t>(layer) * n_expert_ + expert;
    next_state_[k] =
        static_cast<uint8_t>(state((history_[k] << 1u) | 1u, freq_[k] * kFreqDecay + 1));
  }
  // The learned probability that the key's next routing uses it (the routing in progress
  // counts as its previous one).
  double next_use(int layer, int expert) const {
    return p_[next_state_[static_cast<size_t>(layer) * n_expert_ + expert]];
  }

 private:
  static constexpr int kBuckets = 16;
  static constexpr int kStates = 2 * 8 * kBuckets;
  static_assert(kStates <= 256, "next_state_ holds a state in a byte");
  // Pseudo-observations a state borrows from its parent: enough that sampling noise in
  // sparse states (few experts, uniform routing) does not outweigh the layer distance.
  static constexpr double kPrior = 64;

  // The frequency's aging per routing of the key's layer: a half-life of 128 tokens,
  // long enough to tell a layer's hot experts apart (shorter ones lost hits in
  // trace-replay on the calibrated traces).
  static inline const float kFreqDecay = std::exp2(-1.0f / 128);
  // h: bit i set if the routing i+1 back used the key.
  static int state(uint32_t h, float freq) {
    const int bucket = std::min(
        kBuckets - 1, static_cast<int>(std::bit_width(static_cast<unsigned>(freq * freq))));
    return (static_cast<int>(h & 1) * 8 + std::popcount(h & 0xFEu)) * kBuckets + bucket;
  }
  // Learns from the finished routing of routing_layer_ and shifts its keys' histories.
  void finish() {
    uint8_t* h = &history_[static_cast<size_t>(routing_layer_) * n_expert_];
    float* f = &freq_[static_cast<size_t>(routing_layer_) * n_expert_];
    // Counts age (half-life 64 routings of every layer) so the model follows phase changes.
    const double decay = std::exp2(-1.0 / (64.0 * n_layer_));
    for (int s = 0; s < kStates; ++s) {
      seen_[s] *= decay;
      used_[s] *= decay;
    }
    for (int e = 0; e < n_expert_; ++e) {
      const int s = state(h[e], f[e]);
      seen_[s] += 1;
      used_[s] += in_routing_[e];
      h[e] =
          static_cast<uint8_t>((h[e] << 1) | in_routing_[e]);  // next_state_ already describes it
      f[e] = f[e] * kFreqDecay + in_routing_[e];
      in_routing_[e] = 0;
    }
    refresh();
  }
  void refresh();

  int n_layer_, n_expert_;
  std::vector<uint8_t> history_;  // (n_layer * n_expert): the last 8 routings, bit i: i+1 back
  std::vector<float> freq_;       // (n_layer * n_expert): aged uses
  // (n_layer * n_expert): state() of the key's history as of its layer's next routing,
  // kept current so that victim() scans cost a table lookup per entry.
  std::vector<uint8_t> next_state_;
  std::vector<uint8_t> in_routing_;  // (n_expert): used by the routing in progress
  int routing_layer_ = -1;
  std::array<double, kStates> seen_{}, used_{};  // aged counts per state
  std::array<double, kStates> p_{};              // probability of use at the next routing
};

void ExpertCache::Usage::refresh() {
  double seen = 0, used = 0;
  std::array<double, 2> seen1{}, used1{};
  std::array<double, 16> seen2{}, used2{};
  for (int s = 0; s < kStates; ++s) {
    seen += seen_[s], used += used_[s];
    seen1[s / (8 * kBuckets)] += seen_[s], used1[s / (8 * kBuckets)] += used_[s];
    seen2[s / kBuckets] += seen_[s], used2[s / kBuckets] += used_[s];
  }
  const double base = (used + 1.0) / (seen + static_cast<double>(n_expert_));
  for (int s = 0; s < kStates; ++s) {
    const double p1 =
        (used1[s / (8 * kBuckets)] + kPrior * base) / (seen1[s / (8 * kBuckets)] + kPrior);
    const double p2 = (used2[s / kBuckets] + kPrior * p1) / (seen2[s / kBuckets] + kPrior);
    p_[s] = (used_[s] + kPrior * p2) / (seen_[s] + kPrior);
  }
}

namespace {

// inv_distance[l]: 1 / the layers until layer l is routed again, now that `layer` is: 1
// for the next one, n_layer for `layer` itself (its batch is protected by the provider;
// its next use is a token away).
void set_distances(std::vector<double>& inv_distance, int layer) {
  const int n_layer = static_cast<int>(inv_distance.size());
  for (int l = layer + 1; l < n_layer; ++l) inv_distance[l] = 1.0 / (l - layer);
  for (int l = 0; l <= layer; ++l) inv_distance[l] = 1.0 / (l - layer + n_layer);
}

}  // namespace

// A ghost sees each routing's selected experts (begin_routing()), hits and misses alike.
// It counts its own hits and misses as they come, but inserts its misses only when the
// routing ends (at the next begin_routing()), into victims that the routing did not use: as the
// provider does, so a ghost never evicts an expert that the batch still needs, which would
// understate the rule's hits.
struct ExpertCache::Ghost {
  std::unique_ptr<ExpertCache> cache;
  double hits = 0;  // decayed: each access multiplies by the decay, a hit adds 1
  std::vector<std::pair<int, int>> missed;  // (layer, expert) misses of this routing
  std::vector<char> used;                   // (capacity): slot used by this routing
  std::vector<int> used_slots;

  void access(int layer, int expert, double decay) {
    const int slot = cache->lookup(layer, expert);
    hits = hits * decay + (slot >= 0 ? 1.0 : 0.0);
    if (slot < 0) {
      missed.emplace_back(layer, expert);
      return;
    }
    cache->touch(slot);
    use(slot);
  }
  // Ends the routing: reads its misses.
  void flush() {
    for (const auto& [layer, expert] : missed) {
      if (cache->lookup(layer, expert) >= 0) continue;  // missed twice in one routing
      int slot = cache->victim([this](int s) { return !used[s]; });
      if (slot < 0) slot = cache->victim([](int) { return true; });  // smaller than one batch
      cache->assign(slot, layer, expert);
      use(slot);
    }
    missed.clear();
    for (int s : used_slots) used[s] = 0;
    used_slots.clear();
  }
  void use(int slot) {
    if (!used[slot]) used_slots.push_back(slot);
    used[slot] = 1;
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
      inv_distance_(static_cast<size_t>(n_layer), 1.0),
      following_(policy == CachePolicy::kAdaptive ? CachePolicy::kLearned : policy) {
  set_distances(inv_distance_, 0);
  if (policy == CachePolicy::kLearned || policy == CachePolicy::kAdaptive) {
    usage_ = std::make_unique<Usage>(n_layer, n_expert);
  }
  if (policy != CachePolicy::kAdaptive) return;
  for (CachePolicy rule : {CachePolicy::kLearned, CachePolicy::kLru}) {
    ghosts_.push_back(
        Ghost{std::make_unique<ExpertCache>(capacity, n_layer, n_expert, rule, half_life),
              0.0,
              {},
              std::vector<char>(capacity, 0),
              {}});
  }
}

ExpertCache::~ExpertCache() = default;
ExpertCache::ExpertCache(ExpertCache&&) noexcept = default;
ExpertCache& ExpertCache::operator=(ExpertCache&&) noexcept = default;

void ExpertCache::begin_routing(int layer, std::span<const int32_t> selected) {
  set_distances(inv_distance_, layer);
  if (usage_) {
    usage_->begin(layer);
    for (int32_t e : selected) usage_->mark(layer, e);
  }
  replay_in_ghosts(layer, selected);
}

// The routing's accesses, replayed by each ghost (the previous routing's misses are read
// first); the rule of the ghost with more recent hits is followed (learned on ties: it is
// first).
void ExpertCache::replay_in_ghosts(int layer, std::span<const int32_t> selected) {
  if (ghosts_.empty()) return;
  const double decay = std::exp2(-1.0 / (64.0 * std::max<double>(capacity(), 16)));
  for (Ghost& g : ghosts_) {
    g.flush();
    g.cache->begin_routing(layer, selected);
    for (int32_t e : selected) g.access(layer, e, decay);
  }
  const Ghost* best = &ghosts_.front();
  for (const Ghost& g : ghosts_) {
    if (g.hits > best->hits) best = &g;
  }
  following_ = best->cache->policy();
}

double ExpertCache::value(const Entry& e) const {
  switch (following_) {
    case CachePolicy::kLru:
      return static_cast<double>(e.last);
    case CachePolicy::kLfu:
      return e.score;
    case CachePolicy::kAgedLfu:
      return e.score * std::exp2(-static_cast<double>(clock_ - e.last) / half_life_);
    case CachePolicy::kLayerAware:
      return e.score * std::exp2(-static_cast<double>(clock_ - e.last) / half_life_) *
             inv_distance_[e.layer];
    case CachePolicy::kLearned:
      // The learned probability of use at the entry's layer's next routing, per layer
      // until then: an entry of the next layer that may well be needed outranks one of
      // the layer just routed that cannot be needed for a whole token.
      return usage_->next_use(e.layer, e.expert) * inv_distance_[e.layer];
    case CachePolicy::kAdaptive:
      break;  // following_ is always a fixed rule
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
}

int ExpertCache::victim(const std::function<bool(int)>& evictable) const {
  if (n_occupied_ < slots_.size()) {
    // Every slot below the hint is occupied, so filling the cache costs O(capacity) in all.
    while (slots_[free_hint_].layer >= 0) ++free_hint_;
    return free_hint_;
  }
  int best = -1;
  double best_value = 0;
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
    const double v = value(slots_[s]);
    // Lower value goes first; on ties the least recently used. Only a candidate that would
    // win is checked against `evictable` (a call through std::function).
    const bool better =
        best < 0 || v < best_value || (v == best_value && slots_[s].last < slots_[best].last);
    if (!better || !evictable(s)) continue;
    best = s;
    best_value = v;
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
  ++n_occupied_;
  touch(slot);
}

void ExpertCache::erase(int slot) {
  Entry& e = slots_[slot];
  if (e.layer < 0) return;
  index_[static_cast<size_t>(e.layer) * n_expert_ + e.expert] = -1;
  e = Entry{};
  --n_occupied_;
  free_hint_ = std::min(free_hint_, slot);
}

}  // namespace hypura::experts
