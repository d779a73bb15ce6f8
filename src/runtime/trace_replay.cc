#include "runtime/trace_replay.h"

#include <algorithm>
#include <limits>
#include <set>
#include <vector>

namespace hypura::runtime {
namespace {

struct Access {
  int32_t layer, expert;
  bool counted;
};

std::vector<Access> access_stream(const RoutingTrace& trace, int warmup_tokens) {
  std::vector<Access> out;
  std::vector<int64_t> tokens_seen(static_cast<size_t>(trace.n_layer), 0);
  std::vector<int32_t> distinct;
  for (const RoutingRecord& r : trace.records) {
    distinct = r.selected;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
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

ReplayResult replay_online(const RoutingTrace& trace, const std::vector<Access>& stream,
                           uint32_t capacity, CachePolicy policy) {
  ExpertCache cache(capacity, trace.n_layer, trace.n_expert, policy);
  ReplayResult res;
  for (const Access& a : stream) {
    cache.set_layer(a.layer);
    const int slot = cache.lookup(a.layer, a.expert);
    count(res, a, slot >= 0);
    if (slot >= 0) {
      cache.touch(slot);
    } else {
      cache.assign(cache.victim([](int) { return true; }), a.layer, a.expert);
    }
  }
  return res;
}

ReplayResult replay_belady(const RoutingTrace& trace, const std::vector<Access>& stream,
                           uint32_t capacity) {
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  const size_t n_keys = static_cast<size_t>(trace.n_layer) * trace.n_expert;
  const auto key = [&](const Access& a) { return static_cast<size_t>(a.layer) * trace.n_expert + a.expert; };
  // next[i]: index of the next access of stream[i]'s key.
  std::vector<uint64_t> next(stream.size(), kNever), last(n_keys, kNever);
  for (size_t i = stream.size(); i-- > 0;) {
    next[i] = last[key(stream[i])];
    last[key(stream[i])] = i;
  }
  std::vector<uint64_t> cached_next(n_keys, kNever);  // next use of each cached key
  std::vector<bool> cached(n_keys, false);
  std::set<std::pair<uint64_t, size_t>> by_next;      // (next use, key) of cached keys
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

ReplayResult replay(const RoutingTrace& trace, uint32_t capacity, std::optional<CachePolicy> policy,
                    int warmup_tokens) {
  const std::vector<Access> stream = access_stream(trace, warmup_tokens);
  if (!policy) return replay_belady(trace, stream, std::max<uint32_t>(capacity, 1));
  return replay_online(trace, stream, std::max<uint32_t>(capacity, 1), *policy);
}

}  // namespace hypura::runtime
