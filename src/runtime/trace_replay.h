// Replays a routing trace against an expert cache of a given capacity and policy, or
// against Belady's optimal offline policy (evict the entry whose next use is farthest in
// the future: the best hit rate any cache of that capacity can reach on that trace).
//
// The access stream is what the expert provider sees: for each record (pass, layer), the
// distinct experts of the batch in ascending id order, each one access of key
// (layer, expert). Hits are counted only for records whose first token comes at or after
// `warmup_tokens` of that layer (the cache starts empty).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>

#include "runtime/expert_cache.h"
#include "runtime/routing_trace.h"

namespace hypura::runtime {

struct ReplayResult {
  uint64_t accesses = 0;  // counted accesses (after warm-up)
  uint64_t hits = 0;
  uint64_t misses_total = 0;  // all misses incl. warm-up: reads the cache would cause
  double hit_rate() const { return accesses ? static_cast<double>(hits) / accesses : 0; }
};

// policy empty: Belady's optimal. REQUIRES: capacity >= 1.
ReplayResult replay(const RoutingTrace& trace, uint32_t capacity, std::optional<CachePolicy> policy,
                    int warmup_tokens);

}  // namespace hypura::runtime
