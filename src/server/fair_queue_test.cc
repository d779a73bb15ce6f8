#include "server/fair_queue.h"

#include <gtest/gtest.h>

#include <thread>

namespace hypura::server {
namespace {

std::shared_ptr<Job> job(const std::string& client, int32_t tag) {
  return std::make_shared<Job>(client, std::vector<int32_t>{tag}, runtime::GenerateOptions{});
}

TEST(FairQueue, RoundRobinBetweenClientsFifoWithin) {
  FairQueue q(10);
  ASSERT_TRUE(q.push(job("a", 1)).is_ok());
  ASSERT_TRUE(q.push(job("a", 2)).is_ok());
  ASSERT_TRUE(q.push(job("a", 3)).is_ok());
  ASSERT_TRUE(q.push(job("b", 4)).is_ok());
  ASSERT_TRUE(q.push(job("c", 5)).is_ok());
  std::vector<int32_t> order;
  for (int i = 0; i < 5; ++i) order.push_back(q.pop()->prompt()[0]);
  EXPECT_EQ(order, (std::vector<int32_t>{1, 4, 5, 2, 3}));
  EXPECT_EQ(q.size(), 0u);
}

TEST(FairQueue, FullQueueRefuses) {
  FairQueue q(2);
  ASSERT_TRUE(q.push(job("a", 1)).is_ok());
  ASSERT_TRUE(q.push(job("b", 2)).is_ok());
  Status st = q.push(job("c", 3));
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  q.pop();
  EXPECT_TRUE(q.push(job("c", 3)).is_ok());
}

TEST(FairQueue, CloseWakesPopAndReturnsWaiting) {
  FairQueue q(4);
  std::shared_ptr<Job> popped = job("x", 0);
  std::thread t([&] { popped = q.pop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(q.close().empty());
  t.join();
  EXPECT_EQ(popped, nullptr);
  EXPECT_EQ(q.push(job("a", 1)).code(), StatusCode::kCancelled);
}

TEST(Job, ChannelDeliversPiecesThenDone) {
  auto j = job("a", 1);
  ASSERT_NE(j->options().cancel, nullptr);
  std::thread producer([&] {
    j->push_piece("a");
    j->push_piece("b");
    runtime::GenerateResult r;
    r.done_reason = "stop";
    j->finish(r);
  });
  std::string text;
  bool done = false;
  while (!done) {
    auto up = j->wait(std::chrono::milliseconds(50));
    for (auto& p : up.pieces) text += p;
    done = up.done;
  }
  producer.join();
  EXPECT_EQ(text, "ab");
  EXPECT_EQ(j->result()->done_reason, "stop");
  j->cancel("gone");
  EXPECT_TRUE(j->options().cancel->load());
  EXPECT_EQ(j->cancel_reason(), "gone");
}

}  // namespace
}  // namespace hypura::server
