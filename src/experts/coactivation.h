// CoactivationStats: which experts follow which, learned from routing, used to predict
// the next layer's experts before its router runs (speculative prefetch), and persisted
// per model file so the next start begins with what the last run learned.
//
// Counts: freq(L, e) = tokens whose layer-L selection included e; pair(L, a, b) = tokens
// that selected a at layer L and b at layer L+1. The prediction for layer L+1 given the
// distinct experts A of layer L's batch scores each b by the mean over a in A of
// pair(L, a, b) / freq(L, a) (an estimate of P(b at L+1 | a at L)), and keeps the best
// `max_n` whose score reaches `min_score`, counting only sources seen `min_support` times.
// With near-uniform routing every score sits near n_expert_used / n_expert, so a
// threshold above that stops speculation that would only waste reads.
//
// Memory: pairs are stored sparsely per (layer, a): at most n_expert entries each, in
// practice a few dozen. Persistence keeps the strongest 32 successors per source.
//
// Thread-safety: none; owned by the expert provider (forward-pass thread).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace hypura::experts {

class CoactivationStats {
 public:
  CoactivationStats(int n_layer, int n_expert);

  // Layer `layer`'s selections (n_tokens, k). Pairs with the previous call's selections
  // when that call was layer - 1 with the same number of tokens (the same batch).
  void observe(int layer, std::span<const int32_t> selected, int k);
  // Predicted experts of layer + 1 (see above), best first, into *out.
  void predict(int layer, std::span<const int32_t> experts, int max_n, double min_score,
               std::vector<int32_t>* out) const;

  uint64_t frequency(int layer, int expert) const { return freq_[index(layer, expert)]; }
  // Every frequency, (n_layer * n_expert) layer-major, as the planner takes them
  // (scheduler::ModelTensors::expert_frequency); empty before any token was observed.
  std::vector<double> frequencies() const;
  uint64_t tokens() const { return tokens_; }
  int n_layer() const { return n_layer_; }
  int n_expert() const { return n_expert_; }

  // JSON: {"version":1,"n_layer","n_expert","tokens","freq":[[..]],"pairs":[[L,a,b,n],..]}.
  Status save(const std::string& path) const;
  // Fails when the file is missing, malformed, or for another expert geometry.
  static Result<CoactivationStats> load(const std::string& path, int n_layer, int n_expert);
  // cache_dir()/experts/<file name>-<size>.json (common/cache_dir.h); "" when no safe
  // cache directory exists (statistics are then neither loaded nor saved).
  static std::string default_path(const std::string& model_path, uint64_t model_bytes);
  // The routing counts earlier runs of the model saved at default_path, (n_layer *
  // n_expert) layer-major, for the planner (scheduler::ModelTensors::expert_frequency);
  // empty when there are none (or for another geometry).
  static std::vector<double> recorded_frequency(const std::string& model_path, uint64_t model_bytes,
                                                int n_layer, int n_expert);

  static constexpr uint64_t kMinSupport = 8;

 private:
  size_t index(int layer, int expert) const {
    return static_cast<size_t>(layer) * n_expert_ + expert;
  }
  void add_pair(int layer, int32_t a, int32_t b, uint32_t n);

  int n_layer_, n_expert_;
  uint64_t tokens_ = 0;                                          // tokens observed at layer 0
  std::vector<uint64_t> freq_;                                   // (n_layer * n_expert)
  std::vector<std::vector<std::pair<int32_t, uint32_t>>> next_;  // (n_layer * n_expert): (b, count)
  int last_layer_ = -1;
  std::vector<int32_t> last_selected_;  // the previous observe()'s selections
};

}  // namespace hypura::experts
