#include "experts/prefetch_rule.h"

#include <algorithm>

namespace hypura::experts {

PrefetchRule::PrefetchRule(const PrefetchRuleConfig& config) : config_(config) {
  chance_ =
      config_.n_expert > 0 ? static_cast<double>(config_.n_expert_used) / config_.n_expert : 0;
  share_ = static_cast<double>(config_.budget_bytes) / std::max(config_.n_layers, 1);
}

int PrefetchRule::bucket(int rank) {
  return std::clamp(rank, 0, kMaxPrefetchRank - 1);
}

void PrefetchRule::score(int distance, int rank, bool routed) {
  if (distance < 1 || distance > kMaxPrefetchDistance) return;
  Count& c = counts_[distance - 1][bucket(rank)];
  c.guessed++;
  c.routed += routed ? 1 : 0;
}

double PrefetchRule::precision(int distance, int rank) const {
  if (distance < 1 || distance > kMaxPrefetchDistance) return 0;
  const Count& c = counts_[distance - 1][bucket(rank)];
  return (static_cast<double>(c.routed) + kPriorWeight * chance_) /
         (static_cast<double>(c.guessed) + kPriorWeight);
}

uint64_t PrefetchRule::scored(int distance, int rank) const {
  if (distance < 1 || distance > kMaxPrefetchDistance) return 0;
  return counts_[distance - 1][bucket(rank)].guessed;
}

void PrefetchRule::begin_layer() {
  // At most two layers' worth saved up: an allowance unspent for many layers would
  // otherwise be spent in one burst that delays the next demand reads.
  allowance_ = std::min(allowance_ + share_, 2 * share_);
}

PrefetchRule::Admit PrefetchRule::test(double prob, int distance, int rank) const {
  if (prob >= config_.min_prob) return Admit::kProbability;
  if (config_.budget_bytes > 0 && allowance_ > 0 &&
      precision(distance, rank) >= config_.min_precision)
    return Admit::kMeasured;
  return Admit::kNo;
}

void PrefetchRule::charge(uint64_t bytes) {
  // Floored at minus two layers' worth, so that reads admitted by probability alone do
  // not shut the measured test out for good.
  allowance_ = std::max(allowance_ - static_cast<double>(bytes), -2 * share_);
}

}  // namespace hypura::experts
