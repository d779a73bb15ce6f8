// Routing traces and the expert cache on their own: the trace file round trip, and the
// adaptive policy following the better of its ghost rules on a calibrated trace (the
// policies against LRU and Belady's optimum: eval/trace_replay_test.cc).
#include "experts/routing_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "experts/expert_cache.h"

namespace hypura::experts {
namespace {

TEST(RoutingTrace, FileRoundTrip) {
  RoutingTrace t = TraceGenerator{.n_layer = 3, .n_expert = 16, .n_expert_used = 4}.generate(5);
  const int32_t prompt[] = {1, 2, 3, 4, 5, 6, 7, 8};  // a 2-token batch record
  t.add(5, 1, prompt, 8);
  const std::string path =
      (std::filesystem::temp_directory_path() / "hypura_trace_test.txt").string();
  ASSERT_TRUE(t.write(path).is_ok());
  auto back = RoutingTrace::read(path);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->n_expert, 16);
  ASSERT_EQ(back->records.size(), t.records.size());
  for (size_t i = 0; i < t.records.size(); ++i) {
    EXPECT_EQ(back->records[i].layer, t.records[i].layer);
    EXPECT_EQ(back->records[i].n_tokens, t.records[i].n_tokens);
    EXPECT_EQ(back->records[i].selected, t.records[i].selected);
  }
  std::FILE* f = std::fopen(path.c_str(), "a");
  std::fputs("0 1 1 3 99 1 2\n", f);  // expert id out of range
  std::fclose(f);
  auto bad = RoutingTrace::read(path);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("bad or missing expert id"), std::string::npos);
  std::filesystem::remove(path);
}

// The adaptive policy follows whichever rule its ghosts score better: the learned one on a
// calibrated trace with a cache far smaller than a token's working set (LRU thrashes to 0
// there), and the learned rule alone is as good as the default there.
TEST(ExpertCache, AdaptiveFollowsTheBetterGhost) {
  const RoutingTrace t = TraceGenerator{}.generate(80);
  ExpertCache cache(static_cast<uint32_t>(0.05 * t.n_layer * t.n_expert), t.n_layer, t.n_expert,
                    CachePolicy::kAdaptive);
  for (const RoutingRecord& r : t.records) {
    std::vector<int32_t> distinct(r.selected.begin(), r.selected.end());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    cache.begin_routing(r.layer, distinct);
    for (int32_t e : distinct) {
      const int slot = cache.lookup(r.layer, e);
      if (slot >= 0) {
        cache.touch(slot);
      } else {
        cache.assign(cache.victim([](int) { return true; }), r.layer, e);
      }
    }
  }
  EXPECT_EQ(cache.following(), CachePolicy::kLearned);
  EXPECT_EQ(parse_cache_policy("adaptive").value(), CachePolicy::kAdaptive);
  EXPECT_EQ(parse_cache_policy("learned").value(), CachePolicy::kLearned);
}

}  // namespace
}  // namespace hypura::experts
