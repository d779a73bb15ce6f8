// PrefetchRule: the probability test alone where no budget is given; the measured test
// admits exactly the (distance, rank) buckets whose scored precision reaches the
// threshold; the bytes it admits per token stay within the budget plus one read, and an
// allowance saved up over idle layers is spent in at most two layers' worth.
#include "experts/prefetch_rule.h"

#include <gtest/gtest.h>

namespace hypura::experts {
namespace {

constexpr uint64_t kRead = 5 << 20;  // one expert's bytes

PrefetchRuleConfig deepseek_like(uint64_t budget) {
  PrefetchRuleConfig c;
  c.n_expert = 64;
  c.n_expert_used = 6;
  c.n_layers = 26;
  c.min_prob = 0.3;
  c.budget_bytes = budget;
  c.min_precision = 0.5;
  return c;
}

using Admit = PrefetchRule::Admit;

TEST(PrefetchRule, ProbabilityAloneWithoutBudget) {
  PrefetchRule rule(deepseek_like(0));
  rule.begin_layer();
  for (int i = 0; i < 100; ++i) rule.score(1, 0, true);  // rank 0 always right
  EXPECT_EQ(rule.test(0.31, 1, 0), Admit::kProbability);
  EXPECT_EQ(rule.test(0.29, 1, 0), Admit::kNo) << "no budget: the measured test is off";
  EXPECT_EQ(rule.test(0.05, 1, 5), Admit::kNo);
}

TEST(PrefetchRule, MeasuredPrecisionPicksRanksAndDistances) {
  PrefetchRule rule(deepseek_like(26 * kRead));
  // Before any score: chance (6 of 64), below the threshold.
  EXPECT_NEAR(rule.precision(1, 0), 6.0 / 64, 1e-12);
  rule.begin_layer();
  EXPECT_EQ(rule.test(0.05, 1, 0), Admit::kNo);
  // Rank 0 one layer ahead right 18 of 20 times, rank 1 10 of 20, rank 2 2 of 20; rank 0
  // two layers ahead 9 of 20.
  for (int i = 0; i < 20; ++i) {
    rule.score(1, 0, i < 18);
    rule.score(1, 1, i < 10);
    rule.score(1, 2, i < 2);
    rule.score(2, 0, i < 9);
  }
  EXPECT_NEAR(rule.precision(1, 0), (18 + 8 * 6.0 / 64) / 28, 1e-12);
  EXPECT_EQ(rule.scored(1, 1), 20u);
  EXPECT_EQ(rule.test(0.05, 1, 0), Admit::kMeasured);
  EXPECT_EQ(rule.test(0.05, 1, 1), Admit::kNo) << "(10 + 0.75) / 28 < 0.5";
  EXPECT_EQ(rule.test(0.05, 1, 2), Admit::kNo);
  EXPECT_EQ(rule.test(0.05, 2, 0), Admit::kNo);
  EXPECT_EQ(rule.test(0.05, 1, 3), Admit::kNo) << "an unscored rank stays at chance";
  // Out-of-range distances are never admitted by measurement; ranks past the last bucket
  // share it.
  EXPECT_EQ(rule.test(0.05, 0, 0), Admit::kNo);
  EXPECT_EQ(rule.test(0.05, kMaxPrefetchDistance + 1, 0), Admit::kNo);
  EXPECT_EQ(rule.scored(1, kMaxPrefetchRank + 3), rule.scored(1, kMaxPrefetchRank - 1));
}

// Every layer offers six guesses that pass the measured test: the reads admitted over ten
// tokens are the budget's, within one read.
TEST(PrefetchRule, BudgetRespectedPerToken) {
  for (uint64_t budget : {uint64_t{13} * kRead, uint64_t{26} * kRead, uint64_t{40} * kRead}) {
    PrefetchRule rule(deepseek_like(budget));
    for (int i = 0; i < 100; ++i)
      for (int r = 0; r < 6; ++r) rule.score(1, r, true);
    uint64_t admitted = 0;
    const int tokens = 10;
    for (int layer = 0; layer < 26 * tokens; ++layer) {
      rule.begin_layer();
      for (int r = 0; r < 6; ++r) {
        if (rule.test(0.01, 1, r) == Admit::kNo) break;
        rule.charge(kRead);
        admitted += kRead;
      }
    }
    EXPECT_LE(admitted, tokens * budget + kRead) << budget;
    EXPECT_GE(admitted + kRead, tokens * budget) << budget;
  }
}

// Reads admitted by probability are charged too; the allowance saved over idle layers is
// capped at two layers' worth, and its debt at two layers' worth.
TEST(PrefetchRule, AllowanceCapAndProbabilityCharges) {
  PrefetchRule rule(deepseek_like(26 * kRead));  // one read per layer
  for (int i = 0; i < 100; ++i) rule.score(1, 0, true);
  for (int layer = 0; layer < 20; ++layer) rule.begin_layer();
  EXPECT_DOUBLE_EQ(rule.allowance(), 2.0 * kRead);
  int burst = 0;
  while (rule.test(0.01, 1, 0) == Admit::kMeasured && burst < 100) {
    rule.charge(kRead);
    ++burst;
  }
  EXPECT_EQ(burst, 2);
  // Many probability reads: the debt stops at two layers' worth, so two layers later the
  // measured test admits again.
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(rule.test(0.9, 1, 0), Admit::kProbability);
    rule.charge(kRead);
  }
  EXPECT_DOUBLE_EQ(rule.allowance(), -2.0 * kRead);
  rule.begin_layer();
  rule.begin_layer();
  EXPECT_EQ(rule.test(0.01, 1, 0), Admit::kNo);
  rule.begin_layer();
  EXPECT_EQ(rule.test(0.01, 1, 0), Admit::kMeasured);
}

}  // namespace
}  // namespace hypura::experts
