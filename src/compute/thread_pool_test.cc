#include "compute/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace hypura::compute {
namespace {

// Every job runs exactly once on every thread index, jobs never overlap, and the pool
// is reusable thousands of times (it is persistent, not respawned).
TEST(ThreadPool, EveryThreadRunsEveryJobOnce) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    EXPECT_EQ(pool.size(), n);
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> running{0}, overlap{0};
    const int jobs = 2000;
    for (int j = 0; j < jobs; ++j) {
      pool.run([&](int ith, int nth) {
        EXPECT_EQ(nth, n);
        if (running.fetch_add(1) >= nth) overlap++;
        hits[ith]++;
        running.fetch_sub(1);
      });
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), jobs) << "thread " << i;
    EXPECT_EQ(overlap.load(), 0);
  }
}

// jobs() counts the jobs handed to workers: not those that run on the caller alone (one
// item, or a pool of one thread).
TEST(ThreadPool, CountsJobsHandedToWorkers) {
  ThreadPool pool(2), alone(1);
  std::atomic<int> items{0};
  pool.parallel_for(1, [&](int64_t) { items++; });
  EXPECT_EQ(pool.jobs(), 0u);
  pool.parallel_for(5, [&](int64_t) { items++; });
  pool.run([&](int, int) { items++; });
  EXPECT_EQ(pool.jobs(), 2u);
  alone.parallel_for(5, [&](int64_t) { items++; });
  EXPECT_EQ(alone.jobs(), 0u);
  EXPECT_EQ(items.load(), 1 + 5 + 2 + 5);
}

TEST(ThreadPool, SplitRangeCoversEverythingOnce) {
  for (int64_t n : {0, 1, 15, 16, 17, 100, 14336}) {
    for (int nth : {1, 2, 3, 7}) {
      int64_t expect_begin = 0;
      for (int i = 0; i < nth; ++i) {
        int64_t b, e;
        split_range(n, i, nth, 16, &b, &e);
        EXPECT_EQ(b, expect_begin);
        EXPECT_LE(b, e);
        if (e < n) {
          EXPECT_EQ(e % 16, 0);
        }
        expect_begin = e;
      }
      EXPECT_EQ(expect_begin, n);
    }
  }
}

}  // namespace
}  // namespace hypura::compute
