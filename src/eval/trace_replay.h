// Replays a routing trace against an expert cache of a given capacity and policy, or
// against Belady's optimal offline policy (evict the entry whose next use is farthest in
// the future: the best hit rate any cache of that capacity can reach on that trace).
//
// The access stream is what the expert provider sees: for each record (pass, layer), the
// distinct experts of the batch in ascending id order, each one access of key
// (layer, expert). As in the provider, a record's hits are touched before its misses are
// read, and a miss never evicts an expert the same record needs (unless the cache is too
// small to hold one record). Hits are counted only for records whose first token comes at
// or after `warmup_tokens` of that layer (the cache starts empty).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>

#include "experts/expert_cache.h"
#include "experts/routing_trace.h"

namespace hypura::eval {

struct ReplayResult {
  uint64_t accesses = 0;  // counted accesses (after warm-up)
  uint64_t hits = 0;
  uint64_t misses_total = 0;  // all misses incl. warm-up: reads the cache would cause
  double hit_rate() const { return accesses ? static_cast<double>(hits) / accesses : 0; }
};

// policy empty: Belady's optimal. REQUIRES: capacity >= 1.
ReplayResult replay(const experts::RoutingTrace& trace, uint32_t capacity,
                    std::optional<experts::CachePolicy> policy, int warmup_tokens);

// The distribution oracle: an online cache that knows the generator's true mixture (its
// parameters and each layer's hot set) and so each cached expert's probability of being
// selected at each of its layer's next tokens, given the routing seen so far. It evicts
// the expert with the longest expected time to its next use (kExpectedWait), the lowest
// probability of use at its layer's next token (kNextToken), or that probability divided
// by the layers until then (kPerLayer). No policy that learns from the accesses alone can
// know more, so the best of these rules is the ceiling measured for online policies on
// generated traces (Belady's knows the draws themselves). REQUIRES: `trace` made by
// `generator` (same shape and seed), capacity >= 1.
enum class OracleRule { kExpectedWait, kNextToken, kPerLayer };
ReplayResult replay_oracle(const experts::RoutingTrace& trace,
                           const experts::TraceGenerator& generator, uint32_t capacity,
                           int warmup_tokens, OracleRule rule = OracleRule::kExpectedWait);

}  // namespace hypura::eval
