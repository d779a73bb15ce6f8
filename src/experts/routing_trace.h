// RoutingTrace: the experts a MoE model's routers selected, recorded during a run
// (`hypura run|bench --trace FILE`), generated with calibrated locality, and measured.
//
// A trace is a list of records, one per (forward pass, MoE layer): the pass number, the
// layer and each token's selected expert ids by slot, (n_tokens, n_expert_used). A prompt
// batch is one record of many tokens; a generated token one record of one token per layer.
//
// File format (text, one record per line, docs/MOE.md):
//   hypura-routing-trace 1 <n_layer> <n_expert> <n_expert_used>
//   <pass> <layer> <n_tokens> <id> <id> ...        (n_tokens * n_expert_used ids)
//
// Thread-safety: plain data; the recorder appends from the forward-pass thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hypura::experts {

struct RoutingRecord {
  uint32_t pass = 0;
  int32_t layer = 0;
  int32_t n_tokens = 0;
  std::vector<int32_t> selected;  // (n_tokens, n_expert_used)
};

struct RoutingTrace {
  int n_layer = 0, n_expert = 0, n_expert_used = 0;
  std::vector<RoutingRecord> records;

  // Appends one record. REQUIRES: selected.size() is a multiple of n_expert_used.
  void add(uint32_t pass, int layer, const int32_t* selected, int64_t n_selected);
  Status write(const std::string& path) const;
  static Result<RoutingTrace> read(const std::string& path);
};

// Locality of a trace, over each layer's sequence of per-token selections.
struct TraceLocality {
  double repeat_next = 0;   // fraction of a token's selections also selected at the previous token
  double recur_within = 0;  // fraction also selected within the previous `window` tokens
  int window = 8;
  uint64_t tokens = 0;  // tokens per layer
};
TraceLocality measure_locality(const RoutingTrace& trace, int window = 8);

// Parameters of the generator. The defaults are calibrated to published figures for
// Qwen3-30B-A3B (48 layers, 128 experts, 8 used): ~45% of a layer's selections repeat at
// the next token, ~80% recur within 8 tokens, LRU holding 40% of the experts reaches
// 90-95% hits after ~64 tokens (checked by eval/trace_replay_test.cc). Each slot of a token's
// selection is, in turn: one of the previous token's experts (p_previous), one of the
// experts of the 7 tokens before it (p_recent), a uniformly random expert (p_cold), or
// a draw from the layer's popularity: Zipf(zipf_s) over a hot set of n_hot experts.
struct TraceGenerator {
  int n_layer = 48, n_expert = 128, n_expert_used = 8;
  double p_previous = 0.37, p_recent = 0.18, p_cold = 0.04;
  double zipf_s = 0.6;
  double hot_fraction = 56.0 / 128.0;  // n_hot = hot_fraction * n_expert
  uint64_t seed = 1;

  // n_tokens tokens of generation: one record per (token, layer), pass = token.
  RoutingTrace generate(int n_tokens) const;

  // What only the generator knows, for the distribution oracle (trace_replay.h) that
  // measures the ceiling of online policies. Each layer's per-slot probability of drawing
  // each expert through its popularity (the Zipf hot set, weighted by its share of the
  // mixture), as generate() with this seed draws them: (n_layer, n_expert).
  std::vector<std::vector<double>> popularity() const;
  // The per-slot probability that a layer's next token draws an expert, given which of the
  // layer's last 8 tokens selected it (`history` bit i: the token i+1 back) and its
  // popularity(). Ignores the first 8 tokens' shorter history.
  double slot_probability(uint64_t history, double popularity) const;
};

// A trace with uniform random routing (what random-weight synthetic models show).
RoutingTrace uniform_trace(int n_layer, int n_expert, int n_expert_used, int n_tokens,
                           uint64_t seed);

}  // namespace hypura::experts
