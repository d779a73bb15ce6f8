// PrefetchRule: which of the router predictor's guesses an expert provider reads ahead
// (docs/MOE.md, "The budgeted rule").
//
// A guess is one expert of layer L+d's predicted top-k, made d layers ahead, at rank r
// (0 = the router's best). Two tests admit it, in this order:
//
//   probability  its gating probability reaches min_prob. Meaningful only where a single
//                expert can hold that much of the router's mass (few experts, or a
//                renormalised top-k); never true for a softmax over many experts.
//   measured     the precision measured so far for guesses of its distance and rank that
//                were not cached when made (routed to / guessed, started from chance
//                with kPriorWeight pseudo-guesses) reaches min_precision, and the
//                per-token byte budget has room.
//
// The second test needs no property of the gating function (softmax, sigmoid, softmax
// over the selected, with or without renormalisation): only the ranking and how often
// each rank turned out right on this model. The budget is spent layer by layer: each
// routing adds budget / n_layers to an allowance (capped at two layers' worth), every
// speculative read subtracts its bytes (reads admitted by probability too), and a
// measured guess is admitted only while the allowance is positive. So over a token the
// budgeted reads exceed the budget by at most one read.
//
// Thread-safety: none; the provider's forward-pass thread owns it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace hypura::experts {

inline constexpr int kMaxPrefetchDistance = 4;  // = kMaxRouterLookahead
inline constexpr int kMaxPrefetchRank = 16;     // ranks past this share the last bucket

struct PrefetchRuleConfig {
  int n_expert = 0;
  int n_expert_used = 0;
  int n_layers = 1;            // layers routed per token (the MoE layers)
  double min_prob = 0.3;       // probability test; > 1 disables it
  uint64_t budget_bytes = 0;   // measured test's bytes per token; 0 disables it
  double min_precision = 0.5;  // measured test's threshold
};

class PrefetchRule {
 public:
  static constexpr double kPriorWeight = 8;  // pseudo-guesses at chance before any is scored

  explicit PrefetchRule(const PrefetchRuleConfig& config);

  // A guess made `distance` layers ahead at `rank`, uncached when made, was (not) routed to.
  void score(int distance, int rank, bool routed);
  // The measured precision of uncached guesses at (distance, rank), with the prior.
  double precision(int distance, int rank) const;
  uint64_t scored(int distance, int rank) const;

  // A layer is routed: its share of the budget becomes available.
  void begin_layer();
  enum class Admit : uint8_t { kNo, kProbability, kMeasured };
  // Which test, if any, admits a guess (nothing is charged).
  Admit test(double prob, int distance, int rank) const;
  // A speculative read of `bytes` was started.
  void charge(uint64_t bytes);
  double allowance() const { return allowance_; }
  const PrefetchRuleConfig& config() const { return config_; }

 private:
  struct Count {
    uint64_t guessed = 0, routed = 0;
  };
  static int bucket(int rank);
  PrefetchRuleConfig config_;
  double chance_ = 0, share_ = 0, allowance_ = 0;
  std::array<std::array<Count, kMaxPrefetchRank>, kMaxPrefetchDistance> counts_{};
};

}  // namespace hypura::experts
