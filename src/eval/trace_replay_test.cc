// Trace replay: the calibrated generator against the published Qwen3-30B-A3B locality
// figures (checked before any policy is judged on its traces), and the cache policies
// against LRU and Belady's optimum on generated traces.
#include "eval/trace_replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "experts/routing_trace.h"

namespace hypura::eval {
namespace {

constexpr int kTokens = 200;
constexpr int kWarmup = 64;

uint32_t fraction_of_experts(const experts::RoutingTrace& t, double f) {
  return static_cast<uint32_t>(f * t.n_layer * t.n_expert);
}

// The three published figures, within 5 points each.
TEST(RoutingTrace, GeneratorMatchesQwen3Figures) {
  const experts::RoutingTrace t = experts::TraceGenerator{}.generate(kTokens);
  const experts::TraceLocality loc = experts::measure_locality(t, 8);
  EXPECT_NEAR(loc.repeat_next, 0.45, 0.05);
  EXPECT_NEAR(loc.recur_within, 0.80, 0.05);
  const ReplayResult lru =
      replay(t, fraction_of_experts(t, 0.4), experts::CachePolicy::kLru, kWarmup);
  EXPECT_GE(lru.hit_rate(), 0.90 - 0.05);
  EXPECT_LE(lru.hit_rate(), 0.95 + 0.05);
}

TEST(TraceReplay, BeladyBoundsEveryPolicyAndIsExactOnATinyTrace) {
  // One layer, 3 experts, capacity 2, k = 1: accesses a b c a b -> Belady misses a b c b
  // (evicts b at c? no: next uses a@3 b@4, so it evicts b) = 4 misses; LRU misses all 5.
  experts::RoutingTrace t{1, 3, 1, {}};
  for (int32_t e : {0, 1, 2, 0, 1}) t.add(0, 0, &e, 1);
  EXPECT_EQ(replay(t, 2, std::nullopt, 0).misses_total, 4u);
  EXPECT_EQ(replay(t, 2, experts::CachePolicy::kLru, 0).misses_total, 5u);

  const experts::RoutingTrace g =
      experts::TraceGenerator{.n_layer = 8, .n_expert = 64}.generate(120);
  for (double f : {0.1, 0.25, 0.5}) {
    const uint32_t cap = fraction_of_experts(g, f);
    const double best = replay(g, cap, std::nullopt, 16).hit_rate();
    for (experts::CachePolicy p :
         {experts::CachePolicy::kLru, experts::CachePolicy::kLfu, experts::CachePolicy::kAgedLfu,
          experts::CachePolicy::kLayerAware, experts::CachePolicy::kLearned,
          experts::CachePolicy::kAdaptive}) {
      EXPECT_LE(replay(g, cap, p, 16).hit_rate(), best + 1e-12) << experts::cache_policy_name(p);
    }
  }
}

// The default (adaptive) policy never loses to plain LRU, on calibrated traces (exactly:
// within 0.2 points, replay noise) and on uniform traces (within 0.5 points: with no
// locality to exploit the two ghost rules tie and the switching between them costs a
// few hits), across cache sizes from 5% to 90% of the experts.
TEST(TraceReplay, DefaultPolicyNeverLosesToLru) {
  ASSERT_EQ(experts::kDefaultCachePolicy, experts::CachePolicy::kAdaptive);
  const experts::RoutingTrace calibrated = experts::TraceGenerator{}.generate(kTokens);
  const experts::RoutingTrace calibrated2 = experts::TraceGenerator{.seed = 7}.generate(kTokens);
  const experts::RoutingTrace uniform = experts::uniform_trace(16, 64, 4, kTokens, 3);
  const experts::RoutingTrace uniform_moe =
      experts::uniform_trace(24, 8, 2, kTokens, 5);  // the "moe" preset's shape
  struct Case {
    const experts::RoutingTrace* trace;
    double tolerance;
    std::vector<double> fractions;
  };
  const std::vector<double> sizes = {0.05, 0.1, 0.25,
                                     0.4,  0.6, 0.9};  // replays of 6144 experts are slow
  const std::vector<double> fine = {0.05, 0.1, 0.15, 0.25, 0.4, 0.6, 0.75, 0.9};
  for (const Case& c : {Case{&calibrated, 0.002, sizes}, Case{&calibrated2, 0.002, {0.1, 0.15}},
                        Case{&uniform, 0.005, fine}, Case{&uniform_moe, 0.005, fine}}) {
    for (double f : c.fractions) {
      const uint32_t cap = std::max<uint32_t>(1, fraction_of_experts(*c.trace, f));
      const double lru = replay(*c.trace, cap, experts::CachePolicy::kLru, kWarmup).hit_rate();
      const double ours = replay(*c.trace, cap, experts::kDefaultCachePolicy, kWarmup).hit_rate();
      EXPECT_GE(ours, lru - c.tolerance)
          << "fraction " << f << " of " << c.trace->n_layer << "x" << c.trace->n_expert;
    }
  }
}

// On the calibrated traces (two seeds) the default policy's ratio to Belady's, with a
// margin of 0.012-0.015 under what docs/MOE.md records (0.777 at 10% of the experts,
// 0.823 at 15%, 0.892 at 25%, 0.960 at 40%, both seeds), and its distance to the
// distribution oracle: the ceiling of online policies, which knows the generator's true
// mixture. The oracle itself stays under 0.9 x Belady's at 10% (0.79): the target
// is out of reach of any online policy at the planner's cache size for Qwen3-30B-A3B,
// and the policy that learns from the accesses alone comes within 2 points of it.
TEST(TraceReplay, DefaultPolicyNearTheOnlineCeiling) {
  struct Size {
    double fraction, min_ratio;
  };
  for (uint64_t seed : {1, 7}) {
    const experts::TraceGenerator gen{.seed = seed};
    const experts::RoutingTrace t = gen.generate(kTokens);
    for (const Size& s : {Size{0.1, 0.765}, Size{0.15, 0.81}, Size{0.25, 0.88}, Size{0.4, 0.945}}) {
      const uint32_t cap = fraction_of_experts(t, s.fraction);
      const double best = replay(t, cap, std::nullopt, kWarmup).hit_rate();
      const double ours = replay(t, cap, experts::kDefaultCachePolicy, kWarmup).hit_rate();
      EXPECT_GE(ours, s.min_ratio * best) << "seed " << seed << ", fraction " << s.fraction;
      if (seed != 1 || s.fraction > 0.25) continue;  // the oracle once per size
      const double ceiling = replay_oracle(t, gen, cap, kWarmup, OracleRule::kPerLayer).hit_rate();
      EXPECT_GE(ours, ceiling - 0.02) << "fraction " << s.fraction;
      EXPECT_LE(ours, ceiling + 0.005) << "fraction " << s.fraction;
      if (s.fraction == 0.1) {
        EXPECT_LT(ceiling, 0.9 * best);
      }
    }
  }
}

}  // namespace
}  // namespace hypura::eval
