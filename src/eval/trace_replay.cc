#include "eval/trace_replay.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <vector>

namespace hypura::eval {
namespace {

struct Access {
  int32_t layer, expert;
  bool counted;
};

// A record's distinct experts, ascending.
void distinct_of(const experts::RoutingRecord& r, std::vector<int32_t>& out) {
  out = r.selected;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

// The flat access stream, for Belady's.
std::vector<Access> access_stream(const experts::RoutingTrace& trace, int warmup_tokens) {
  std::vector<Access> out;
  std::vector<int64_t> tokens_seen(static_cast<size_t>(trace.n_layer), 0);
  std::vector<int32_t> distinct;
  for (const experts::RoutingRecord& r : trace.records) {
    distinct_of(r, distinct);
    const bool counted = tokens_seen[r.layer] >= warmup_tokens;
    for (int32_t e : distinct) out.push_back({r.layer, e, counted});
    tokens_seen[r.layer] += r.n_tokens;
  }
  return out;
}

void count(ReplayResult& res, const Access& a, bool hit) {
  res.misses_total += !hit;
  if (!a.counted) return;
  ++res.accesses;
  res.hits += hit;
}

// Replays the records on `cache` (ExpertCache's interface, with begin() for a record) as
// the expert provider drives it: hits touched first, then misses read into victims that
// the record itself does not need.
template <typename Cache>
ReplayResult replay_records(const experts::RoutingTrace& trace, int warmup_tokens, Cache& cache) {
  ReplayResult res;
  std::vector<int64_t> tokens_seen(static_cast<size_t>(trace.n_layer), 0);
  std::vector<int32_t> distinct, missed;
  std::vector<char> wanted(cache.capacity(), 0);  // (capacity): holds an expert of this record
  std::vector<int> wanted_slots;
  for (const experts::RoutingRecord& r : trace.records) {
    distinct_of(r, distinct);
    cache.begin(r.layer, distinct);
    missed.clear();
    for (int32_t e : distinct) {
      const int slot = cache.lookup(r.layer, e);
      if (slot < 0) {
        missed.push_back(e);
        continue;
      }
      cache.touch(slot);
      wanted[slot] = 1;
      wanted_slots.push_back(slot);
    }
    for (int32_t e : missed) {
      int slot = cache.victim([&](int s) { return !wanted[s]; });
      if (slot < 0) slot = cache.victim([](int) { return true; });  // smaller than one record
      cache.assign(slot, r.layer, e);
      wanted[slot] = 1;
      wanted_slots.push_back(slot);
    }
    for (int s : wanted_slots) wanted[s] = 0;
    wanted_slots.clear();
    res.misses_total += missed.size();
    if (tokens_seen[r.layer] >= warmup_tokens) {
      res.accesses += distinct.size();
      res.hits += distinct.size() - missed.size();
    }
    tokens_seen[r.layer] += r.n_tokens;
  }
  return res;
}

// ExpertCache under replay_records().
struct OnlineCache {
  experts::ExpertCache cache;
  uint32_t capacity() const { return cache.capacity(); }
  void begin(int layer, const std::vector<int32_t>& distinct) {
    cache.begin_routing(layer, distinct);
  }
  int lookup(int layer, int expert) const { return cache.lookup(layer, expert); }
  void touch(int slot) { cache.touch(slot); }
  int victim(const std::function<bool(int)>& evictable) const { return cache.victim(evictable); }
  void assign(int slot, int layer, int expert) { cache.assign(slot, layer, expert); }
};

// The distribution oracle (header). history_ mirrors the generator's state: bit i of a
// key is whether its layer's token i+1 back selected it, where a record being replayed
// already counts as its layer's latest token (its selections are known when it is routed).
class OracleCache {
 public:
  OracleCache(const experts::TraceGenerator& g, uint32_t capacity, OracleRule rule)
      : gen_(g),
        rule_(rule),
        popularity_(g.popularity()),
        slots_(capacity),
        index_(static_cast<size_t>(g.n_layer) * g.n_expert, -1),
        history_(static_cast<size_t>(g.n_layer) * g.n_expert, 0) {}

  uint32_t capacity() const { return static_cast<uint32_t>(slots_.size()); }
  void begin(int layer, const std::vector<int32_t>& distinct) {
    current_layer_ = layer;
    uint64_t* h = &history_[static_cast<size_t>(layer) * gen_.n_expert];
    for (int e = 0; e < gen_.n_expert; ++e) h[e] <<= 1;
    for (int32_t e : distinct) h[e] |= 1;
  }
  int lookup(int layer, int expert) const { return index_[key(layer, expert)]; }
  void touch(int) {}
  int victim(const std::function<bool(int)>& evictable) {
    int best = -1;
    double best_value = 0;
    for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
      if (slots_[s].layer < 0) return s;
      if (!evictable(s)) continue;
      const double v = value(slots_[s]);
      if (best < 0 || v < best_value) {
        best = s;
        best_value = v;
      }
    }
    return best;
  }
  void assign(int slot, int layer, int expert) {
    Slot& s = slots_[slot];
    if (s.layer >= 0) index_[key(s.layer, s.expert)] = -1;
    s = Slot{layer, expert};
    index_[key(layer, expert)] = slot;
  }

 private:
  struct Slot {
    int layer = -1, expert = -1;
    uint64_t history = ~0ull;  // the history next_use and wait were computed for
    double next_use = 0;       // probability of selection at the layer's next token
    double wait = 0;           // expected tokens of the layer that pass before the next use
  };
  size_t key(int layer, int expert) const {
    return static_cast<size_t>(layer) * gen_.n_expert + expert;
  }
  // Probability that a token with this history selects the expert: n_expert_used draws.
  double selected(uint64_t history, double popularity) const {
    return 1.0 - std::pow(1.0 - gen_.slot_probability(history, popularity), gen_.n_expert_used);
  }
  void refresh(Slot& s) const;
  double value(Slot& s) const;  // higher: keep

  const experts::TraceGenerator& gen_;
  OracleRule rule_;
  std::vector<std::vector<double>> popularity_;  // (n_layer, n_expert)
  std::vector<Slot> slots_;                      // (capacity)
  std::vector<int> index_;                       // (n_layer * n_expert): slot or -1
  std::vector<uint64_t> history_;                // (n_layer * n_expert)
  int current_layer_ = 0;
};

// The expected wait sums, over the layer's next tokens, the probability that none of the
// tokens so far selected the expert; assuming it is not selected, its history shifts in
// zeros until only the popularity and random draws remain (a geometric tail).
void OracleCache::refresh(Slot& s) const {
  const uint64_t h = history_[key(s.layer, s.expert)];
  if (h == s.history) return;
  const double pop = popularity_[s.layer][s.expert];
  s.history = h;
  s.next_use = selected(h, pop);
  double survive = 1, wait = 0;
  for (int j = 0; j < 8; ++j) {
    survive *= 1.0 - selected(h << j, pop);
    wait += survive;
  }
  const double tail = std::max(selected(0, pop), 1e-9);
  s.wait = wait + survive * (1.0 - tail) / tail;
}

double OracleCache::value(Slot& s) const {
  refresh(s);
  const int n_layer = gen_.n_layer;
  // Layers until the entry's layer is routed again: the current one's next use is a token away.
  const int distance = (s.layer - current_layer_ + n_layer - 1) % n_layer + 1;
  switch (rule_) {
    case OracleRule::kNextToken:
      return s.next_use;
    case OracleRule::kPerLayer:
      return s.next_use / distance;
    case OracleRule::kExpectedWait:
      break;
  }
  return -(distance + static_cast<double>(n_layer) * s.wait);
}

ReplayResult replay_belady(const experts::RoutingTrace& trace, const std::vector<Access>& stream,
                           uint32_t capacity) {
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  const size_t n_keys = static_cast<size_t>(trace.n_layer) * trace.n_expert;
  const auto key = [&](const Access& a) {
    return static_cast<size_t>(a.layer) * trace.n_expert + a.expert;
  };
  // next[i]: index of the next access of stream[i]'s key.
  std::vector<uint64_t> next(stream.size(), kNever), last(n_keys, kNever);
  for (size_t i = stream.size(); i-- > 0;) {
    next[i] = last[key(stream[i])];
    last[key(stream[i])] = i;
  }
  std::vector<uint64_t> cached_next(n_keys, kNever);  // next use of each cached key
  std::vector<bool> cached(n_keys, false);
  std::set<std::pair<uint64_t, size_t>> by_next;  // (next use, key) of cached keys
  ReplayResult res;
  for (size_t i = 0; i < stream.size(); ++i) {
    const size_t k = key(stream[i]);
    const bool hit = cached[k];
    count(res, stream[i], hit);
    if (hit) {
      by_next.erase({cached_next[k], k});
    } else if (by_next.size() >= capacity) {
      auto farthest = std::prev(by_next.end());
      cached[farthest->second] = false;
      by_next.erase(farthest);
    }
    cached[k] = true;
    cached_next[k] = next[i];
    by_next.insert({next[i], k});
  }
  return res;
}

}  // namespace

ReplayResult replay(const experts::RoutingTrace& trace, uint32_t capacity,
                    std::optional<experts::CachePolicy> policy, int warmup_tokens) {
  if (!policy)
    return replay_belady(trace, access_stream(trace, warmup_tokens),
                         std::max<uint32_t>(capacity, 1));
  OnlineCache cache{experts::ExpertCache(std::max<uint32_t>(capacity, 1), trace.n_layer,
                                         trace.n_expert, *policy)};
  return replay_records(trace, warmup_tokens, cache);
}

ReplayResult replay_oracle(const experts::RoutingTrace& trace,
                           const experts::TraceGenerator& generator, uint32_t capacity,
                           int warmup_tokens, OracleRule rule) {
  OracleCache cache(generator, std::max<uint32_t>(capacity, 1), rule);
  return replay_records(trace, warmup_tokens, cache);
}

}  // namespace hypura::eval
