// ExpertCache: which (layer, expert) pairs occupy the expert provider's RAM slots, and
// which one to evict next (the replacement policy).
//
// The cache only keeps bookkeeping: keys, slot numbers and per-slot policy state. The
// expert provider owns the slot memory and decides which slots may be evicted at all
// (pinned, read in flight, wanted by the batch being computed); victim() picks among
// those. `hypura trace-replay` drives the same class over recorded routing traces, so the
// policy measured offline is the policy that runs.
//
// Policies (docs/MOE.md has the measurements that chose the default):
//   kLru      least recently used
//   kLfu      least frequently used since insertion (ties: least recent)
//   kAgedLfu  frequency with exponential aging: each access adds 1 to a score that halves
//             every `half_life` accesses of the cache (ties: least recent)
//   kLayerAware  the aged frequency divided by how many layers away the entry's next
//             possible use is: layers are routed in order, so an expert of the layer
//             just computed cannot be needed before a whole token has passed, while one
//             of the next layer may be needed at once. This is the part of Belady's
//             knowledge an online cache has for free; it keeps caches smaller than one
//             token's working set from thrashing the way LRU does. Needs begin_routing().
//   kLearned  evicts the entry least likely to be used at its layer's next routing, per
//             layer until then. The likelihood is learned from the access stream alone:
//             each key has a feature state (used at its layer's previous routing; how
//             many of the 7 routings before; its aged frequency of use, half-life 128
//             routings, in half-octave buckets), and for every state the cache counts
//             how often keys in it were used at the next routing (aged counts over all
//             keys of each finished routing, sparse states shrunk toward coarser ones). On traces
//             calibrated to Qwen3-30B-A3B it comes within 1-2 points of an oracle that knows the
//             generator's true probabilities (docs/MOE.md). Needs begin_routing() once per routing.
//   kAdaptive  (default) runs learned and LRU as ghost caches of the same capacity (keys
//             only, fed every access) and evicts by the rule of whichever ghost has had
//             more hits recently (hits decayed with a half-life of 64 x capacity
//             accesses; learned on ties). Learned wins wherever routing has locality
//             and ties LRU (within 0.22 points) on uniform routing; the LRU ghost is
//             the guard for routing its features do not describe (docs/MOE.md,
//             eval/trace_replay_test.cc).
//
// Cost: victim() is one pass over the occupied slots (a table lookup each for kLearned);
// kAdaptive adds a pass per ghost that misses. begin_routing() is O(n_expert + n_layer)
// for kLearned and kAdaptive (plus the ghosts' replay of the routing's experts). No allocation once
// every ghost has seen its largest routing.
//
// Thread-safety: none; one owner (the forward-pass thread, or the replay tool).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace hypura::experts {

enum class CachePolicy { kLru, kLfu, kAgedLfu, kLayerAware, kLearned, kAdaptive };
// "lru", "lfu", "aged-lfu", "layer-aware", "learned", "adaptive"
const char* cache_policy_name(CachePolicy policy);
Result<CachePolicy> parse_cache_policy(const std::string& name);

// The policy the expert provider uses unless told otherwise (chosen on traces, MOE.md).
inline constexpr CachePolicy kDefaultCachePolicy = CachePolicy::kAdaptive;

class ExpertCache {
 public:
  // capacity slots for keys (layer in [0, n_layer), expert in [0, n_expert)).
  // half_life: kAgedLfu's aging, in cache accesses; 0 picks n_layer * 8 (about 8 tokens
  // of generation, every layer accessed once per token).
  ExpertCache(uint32_t capacity, int n_layer, int n_expert, CachePolicy policy,
              double half_life = 0);
  ~ExpertCache();
  ExpertCache(ExpertCache&&) noexcept;
  ExpertCache& operator=(ExpertCache&&) noexcept;

  uint32_t capacity() const { return static_cast<uint32_t>(slots_.size()); }
  CachePolicy policy() const { return policy_; }

  // The slot holding (layer, expert), or -1.
  int lookup(int layer, int expert) const {
    return index_[static_cast<size_t>(layer) * n_expert_ + expert];
  }
  // Starts a routing of `layer` (one token, or one batch, through that layer's router)
  // that selected the distinct experts `selected`: the position in the layer cycle
  // (kLayerAware, kLearned), and what the routing uses, whether the owner then finds each
  // expert cached, reads it, or finds it brought in by a speculative read: kLearned learns
  // from it, and kAdaptive's ghosts replay exactly these accesses. Call once per routing,
  // before its touch()/assign() calls.
  void begin_routing(int layer, std::span<const int32_t> selected);
  // Records an access of the entry in `slot` (a hit, or the use after an insert).
  void touch(int slot);
  // A slot for a new entry: an empty slot if any, else the policy's victim among occupied
  // slots for which evictable(slot) is true; -1 when there is none.
  int victim(const std::function<bool(int)>& evictable) const;
  // Puts (layer, expert) into `slot`, dropping whatever it held; counts as an access.
  void assign(int slot, int layer, int expert);
  // Empties `slot` (e.g. its read failed).
  void erase(int slot);

  bool occupied(int slot) const { return slots_[slot].layer >= 0; }
  int layer_of(int slot) const { return slots_[slot].layer; }
  int expert_of(int slot) const { return slots_[slot].expert; }
  // kAdaptive: the rule followed now (kLru or kLayerAware); the policy itself otherwise.
  CachePolicy following() const { return following_; }

 private:
  struct Entry {
    int layer = -1, expert = -1;
    uint64_t last = 0;  // clock_ at the last access
    double score = 0;   // kLfu: accesses; kAgedLfu: aged accesses as of `last`
  };
  // kLearned's model: each key's usage history over its layer's routings and how often
  // keys with each history were used at the next routing (expert_cache.cc).
  class Usage;
  // kAdaptive's shadow of one fixed rule: a cache of the same capacity over the same
  // accesses, and its hits decayed over recent accesses.
  struct Ghost;
  double value(const Entry& e) const;  // the rule's keep-worthiness now (higher: keep)
  void replay_in_ghosts(int layer, std::span<const int32_t> selected);  // kAdaptive

  CachePolicy policy_;
  int n_expert_;
  double half_life_;
  uint64_t clock_ = 0;
  int n_layer_;
  std::vector<Entry> slots_;  // (capacity)
  size_t n_occupied_ = 0;
  mutable int free_hint_ = 0;         // every slot below it is occupied
  std::vector<int> index_;            // (n_layer * n_expert): slot or -1
  std::vector<double> inv_distance_;  // (n_layer): 1 / layers until routed again
  CachePolicy following_;             // the rule value() applies
  std::vector<Ghost> ghosts_;         // kAdaptive: LRU, layer-aware
  std::unique_ptr<Usage> usage_;      // kLearned
};

}  // namespace hypura::experts
