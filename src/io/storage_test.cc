#include "io/storage.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "io/aligned_buffer.h"
#include "io/testing/fault_queue.h"

namespace hypura::io {
namespace {

// Byte i of the test file: a cheap hash, so misplaced bytes are caught.
uint8_t pattern(uint64_t i) {
  return static_cast<uint8_t>((i * 2654435761u) >> 13);
}

class StorageTest : public ::testing::TestWithParam<QueueKind> {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(::testing::TempDir() + "hypura_storage_test_" +
                            std::to_string(::getpid()) + ".bin");
    std::vector<char> bytes(kFileSize);
    for (uint64_t i = 0; i < kFileSize; ++i) bytes[i] = static_cast<char>(pattern(i));
    std::ofstream(*path_, std::ios::binary).write(bytes.data(), kFileSize);
  }
  static void TearDownTestSuite() {
    std::remove(path_->c_str());
    delete path_;
  }

  std::unique_ptr<Storage> open(StorageOptions o = {}) {
    o.engine = GetParam();
    o.request_bytes = 256 << 10;  // small, so ranges split into many device reads
    o.queue_depth = 8;
    auto s = Storage::open(*path_, o);
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    return std::move(s).value();
  }

  // Expects buf[0, len) to hold file bytes [offset, offset + len).
  static void expect_bytes(const uint8_t* buf, uint64_t offset, uint64_t len) {
    for (uint64_t i = 0; i < len; ++i) {
      if (buf[i] != pattern(offset + i)) {
        FAIL() << "byte " << i << " of read at " << offset << " differs";
      }
    }
  }

  static constexpr uint64_t kFileSize = (5 << 20) + 12345;  // not a multiple of 4096
  static std::string* path_;
};
std::string* StorageTest::path_ = nullptr;

TEST_P(StorageTest, OpensDirectAndReportsSize) {
  auto s = open();
  EXPECT_EQ(s->size(), kFileSize);
  if (s->direct()) {
    EXPECT_EQ(s->alignment(), 4096u);
  }
}

TEST_P(StorageTest, ReadsAnyRangeIntoAnyBuffer) {
  auto s = open();
  std::mt19937_64 rng(7);
  AlignedBuffer buf(3 << 20);
  for (int i = 0; i < 60; ++i) {
    uint64_t len = rng() % (2 << 20) + 1;
    uint64_t offset = rng() % (kFileSize - len);
    uint64_t shift = i % 3 == 0 ? 0 : rng() % 4096;  // aligned, congruent or not
    if (i % 3 == 1) shift = offset % 4096;           // congruent: middle read in place
    ASSERT_TRUE(s->read(offset, {buf.data() + shift, len}).is_ok());
    expect_bytes(buf.data() + shift, offset, len);
  }
}

TEST_P(StorageTest, CongruentBufferCopiesOnlyHeadAndTail) {
  auto s = open();
  if (!s->direct()) GTEST_SKIP() << "filesystem refuses O_DIRECT";
  uint64_t offset = 1000, len = 3 << 20;
  AlignedView v = aligned_view(offset, len);
  AlignedBuffer buf(v.buffer_bytes);
  ASSERT_TRUE(s->read(offset, {buf.data() + v.skip, len}).is_ok());
  expect_bytes(buf.data() + v.skip, offset, len);
  EXPECT_LE(s->stats().bounced_bytes, 2 * 4096u);
}

TEST_P(StorageTest, ReadsTheLastBytesOfTheFile) {
  auto s = open();
  std::vector<uint8_t> buf(5000);
  ASSERT_TRUE(s->read(kFileSize - 5000, buf).is_ok());
  expect_bytes(buf.data(), kFileSize - 5000, 5000);
  ASSERT_TRUE(s->read(kFileSize - 1, {buf.data(), 1}).is_ok());
  EXPECT_EQ(buf[0], pattern(kFileSize - 1));
}

TEST_P(StorageTest, RejectsRangesOutsideTheFile) {
  auto s = open();
  std::vector<uint8_t> buf(10);
  Status st = s->read(kFileSize - 5, buf);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("outside the file"), std::string::npos);
}

TEST_P(StorageTest, ManyConcurrentRequestsCompleteInAnyWaitOrder) {
  auto s = open();
  constexpr int kN = 40;
  constexpr uint64_t kLen = 300000;
  std::vector<std::vector<uint8_t>> bufs(kN, std::vector<uint8_t>(kLen));
  std::vector<ReadId> ids;
  for (int i = 0; i < kN; ++i) ids.push_back(s->submit(i * 123457ull, bufs[i]));
  for (int i = kN - 1; i >= 0; --i) {
    ASSERT_TRUE(s->wait(ids[i]).is_ok());
    expect_bytes(bufs[i].data(), i * 123457ull, kLen);
  }
  EXPECT_GE(s->stats().device_reads, static_cast<uint64_t>(kN) * 2);
}

INSTANTIATE_TEST_SUITE_P(Engines, StorageTest,
                         ::testing::Values(QueueKind::kAuto, QueueKind::kThreads),
                         [](const auto& info) {
                           return std::string(queue_kind_name(info.param)) == "auto" ? "auto"
                                                                                     : "threads";
                         });

class FaultTest : public StorageTest {
 protected:
  std::unique_ptr<Storage> open_faulty(FaultPlan plan, std::shared_ptr<const FaultCounts>* counts,
                                       int read_retries = StorageOptions{}.read_retries) {
    auto inner = make_queue(GetParam(), 8);
    EXPECT_TRUE(inner.is_ok());
    auto engine = std::make_unique<FaultInjectingQueue>(std::move(inner).value(), plan);
    *counts = engine->counts();
    StorageOptions o;
    o.request_bytes = 256 << 10;
    o.queue_depth = 8;
    o.read_retries = read_retries;
    auto s = Storage::open(*path_, o, std::move(engine));
    EXPECT_TRUE(s.is_ok());
    return std::move(s).value();
  }
};

TEST_P(FaultTest, EioFailsOnlyTheRequestsThatTouchTheBadRange) {
  FaultPlan plan;
  plan.fail_begin = 2 << 20;
  plan.fail_end = (2 << 20) + 1;
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(plan, &counts);
  std::vector<uint8_t> bad(1 << 20), good(1 << 20);
  ReadId a = s->submit((2 << 20) - 1000, bad);
  ReadId b = s->submit(3 << 20, good);
  Status st = s->wait(a);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("Input/output error"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(*path_), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("failed 3 times"), std::string::npos) << st.message();
  ASSERT_TRUE(s->wait(b).is_ok());
  expect_bytes(good.data(), 3 << 20, good.size());
  EXPECT_GE(counts->eio, 3u);  // the read and its two retries
  EXPECT_EQ(s->stats().retried_reads, 2u);
  EXPECT_EQ(s->stats().failed_requests, 1u);
}

TEST_P(FaultTest, TransientEioIsReadAgain) {
  FaultPlan plan;
  plan.eio_probability = 0.05;
  plan.seed = 5;
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(plan, &counts, /*read_retries=*/4);  // 5 failures in a row: ~3e-7
  std::vector<uint8_t> buf(1 << 20);
  for (int i = 0; i < 20; ++i) {
    const uint64_t offset = static_cast<uint64_t>(i) * 99991;
    ASSERT_TRUE(s->read(offset, buf).is_ok());
    expect_bytes(buf.data(), offset, buf.size());
  }
  EXPECT_GT(counts->eio, 0u);
  EXPECT_EQ(s->stats().retried_reads, counts->eio);
  EXPECT_EQ(s->stats().failed_requests, 0u);
}

TEST_P(FaultTest, ShortReadsAndInterruptsAreContinued) {
  FaultPlan plan;
  plan.short_probability = 0.4;
  plan.eintr_probability = 0.2;
  plan.seed = 42;
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(plan, &counts);
  AlignedBuffer buf(4 << 20);
  for (uint64_t offset : {0ull, 4096ull, 777ull}) {
    ASSERT_TRUE(s->read(offset, {buf.data() + 13, 4000000}).is_ok());
    expect_bytes(buf.data() + 13, offset, 4000000);
    ASSERT_TRUE(s->read(offset, {buf.data() + offset % 4096, 4000000}).is_ok());
    expect_bytes(buf.data() + offset % 4096, offset, 4000000);
  }
  EXPECT_GT(counts->short_reads, 0u);
  EXPECT_GT(counts->eintr, 0u);
  EXPECT_GT(s->stats().short_reads, 0u);
}

TEST_P(FaultTest, RandomEioNeverReportsSuccessForABadBuffer) {
  FaultPlan plan;
  plan.eio_probability = 0.05;
  plan.seed = 3;
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(plan, &counts, /*read_retries=*/0);
  std::vector<uint8_t> buf(1 << 20);
  int failed = 0;
  for (int i = 0; i < 30; ++i) {
    std::fill(buf.begin(), buf.end(), 0);
    uint64_t offset = static_cast<uint64_t>(i) * 99991;
    Status st = s->read(offset, buf);
    if (st.is_ok()) {
      expect_bytes(buf.data(), offset, buf.size());  // success means every byte arrived
    } else {
      ++failed;
      EXPECT_EQ(st.code(), StatusCode::kIoError);
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_EQ(static_cast<uint64_t>(failed), s->stats().failed_requests);
}

TEST_P(FaultTest, StalledReadCompletesLateWithItsBytes) {
  FaultPlan plan;
  plan.stall_probability = 1;
  plan.stall_ms = 60;
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(plan, &counts);
  std::vector<uint8_t> buf(100000);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(s->read(12345, buf).is_ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(60));
  expect_bytes(buf.data(), 12345, buf.size());
  EXPECT_GT(counts->stalls, 0u);
}

TEST(FaultPlanText, EveryKeyParsesAndAnythingElseIsRefused) {
  auto plan = parse_fault_plan(
      "eio=0.25,short=0.5,eintr=1,stall=0.01:3000,fail=100-200,fail-times=3,seed=9");
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->eio_probability, 0.25);
  EXPECT_EQ(plan->short_probability, 0.5);
  EXPECT_EQ(plan->eintr_probability, 1.0);
  EXPECT_EQ(plan->stall_probability, 0.01);
  EXPECT_EQ(plan->stall_ms, 3000);
  EXPECT_EQ(plan->fail_begin, 100u);
  EXPECT_EQ(plan->fail_end, 200u);
  EXPECT_EQ(plan->fail_times, 3u);
  EXPECT_EQ(plan->seed, 9u);
  EXPECT_TRUE(parse_fault_plan("").is_ok());
  for (const char* bad : {"eio=2", "eio=-0.1", "eio=x", "stall=0.1", "stall=0.1:-5", "fail=200-100",
                          "fail=5", "seed=1.5", "bogus=1", "eio", "eio=0.1,,seed=1"}) {
    EXPECT_FALSE(parse_fault_plan(bad).is_ok()) << bad;
  }
}

// A failing range that heals after fail_times failures: the read succeeds after that many
// attempts (Storage's retries absorb them).
TEST_P(FaultTest, RangeThatHealsIsReadOnTheLastRetry) {
  FaultPlan plan;
  plan.fail_begin = 5000;
  plan.fail_end = 5001;
  plan.fail_times = 2;
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(plan, &counts);
  std::vector<uint8_t> buf(8000);
  ASSERT_TRUE(s->read(0, buf).is_ok());
  expect_bytes(buf.data(), 0, buf.size());
  EXPECT_EQ(counts->eio, 2u);
  EXPECT_EQ(s->stats().retried_reads, 2u);
}

TEST_P(FaultTest, HeldReadCompletesWhenItsGateOpens) {
  FaultPlan plan;
  plan.gate = std::make_shared<ReadGate>();
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(plan, &counts);
  OpenAtExit open_at_exit{plan.gate};
  std::vector<uint8_t> buf(100000);
  ReadId id = s->submit(5000, buf);
  EXPECT_FALSE(s->done(id));  // the gate holds every read
  plan.gate->open(5000, 5000 + buf.size());
  ASSERT_TRUE(s->wait(id).is_ok());
  expect_bytes(buf.data(), 5000, buf.size());
}

// Background reads go one device read at a time (queue_depth 8 / 8) and yield to normal
// ones: a normal read submitted after a long background one finishes first, and both
// deliver their bytes.
TEST_P(FaultTest, NormalReadsOvertakeBackgroundReads) {
  FaultPlan plan;
  plan.gate = std::make_shared<ReadGate>();
  plan.gate->open(3 << 20, 4 << 20);  // the normal read's bytes; the background ones wait
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(plan, &counts);
  OpenAtExit open_at_exit{plan.gate};
  std::vector<uint8_t> background(2 << 20), normal(100000);  // 8 device reads, and 1
  ReadId bg = s->submit(4096, background, Priority::kBackground);
  ReadId id = s->submit(3 << 20, normal);
  ASSERT_TRUE(s->wait(id).is_ok()) << "the normal read must not queue behind held ones";
  EXPECT_FALSE(s->done(bg));
  expect_bytes(normal.data(), 3 << 20, normal.size());
  plan.gate->open_all();
  ASSERT_TRUE(s->wait(bg).is_ok());
  expect_bytes(background.data(), 4096, background.size());
}

// A request whose last segment was cut just as the in-flight limit was reached may
// finish, and be freed by its waiter, before the I/O thread looks at its queue again
// (this was a use after free; ASan builds catch it): one-segment background reads, each
// waited for before the next is submitted, alternating with normal ones.
TEST_P(FaultTest, FinishedRequestsLeaveTheirQueue) {
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(FaultPlan{}, &counts);
  std::vector<uint8_t> buf(4096);
  for (int i = 0; i < 200; ++i) {
    const uint64_t offset = static_cast<uint64_t>(i) * 4096;
    ASSERT_TRUE(
        s->wait(s->submit(offset, buf, i % 2 ? Priority::kNormal : Priority::kBackground)).is_ok());
    expect_bytes(buf.data(), offset, buf.size());
  }
}

// An expedited background read is served as a normal one: ahead of the background read
// submitted before it.
TEST_P(FaultTest, ExpeditedBackgroundReadOvertakesOtherBackgroundReads) {
  FaultPlan plan;
  plan.gate = std::make_shared<ReadGate>();
  plan.gate->open(3 << 20, 4 << 20);  // the second read's bytes; the first one waits
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(plan, &counts);
  OpenAtExit open_at_exit{plan.gate};
  std::vector<uint8_t> first(2 << 20), second(100000);
  ReadId a = s->submit(4096, first, Priority::kBackground);
  ReadId b = s->submit(3 << 20, second, Priority::kBackground);
  s->expedite(b);
  ASSERT_TRUE(s->wait(b).is_ok()) << "the expedited read must not queue behind the held one";
  EXPECT_FALSE(s->done(a));
  expect_bytes(second.data(), 3 << 20, second.size());
  plan.gate->open_all();
  ASSERT_TRUE(s->wait(a).is_ok());
  expect_bytes(first.data(), 4096, first.size());
}

// cancel() drops the segments of a read not yet issued: a background read of eight
// device reads, its first one held at the gate, ends kCancelled after that one alone; a
// read whose only segment is in flight cannot be cancelled and completes.
TEST_P(FaultTest, CancelDropsSegmentsNotYetIssued) {
  FaultPlan plan;
  plan.gate = std::make_shared<ReadGate>();
  std::shared_ptr<const FaultCounts> counts;
  auto s = open_faulty(plan, &counts);
  OpenAtExit open_at_exit{plan.gate};
  std::vector<uint8_t> background(2 << 20), small(4096);
  ReadId bg = s->submit(4096, background, Priority::kBackground);
  while (s->stats().device_reads < 1) std::this_thread::yield();  // its first read is held
  ReadId one = s->submit(3 << 20, small);
  while (s->stats().device_reads < 2) std::this_thread::yield();
  EXPECT_EQ(s->cancel(bg), (2u << 20) - (256u << 10)) << "seven of its eight reads";
  EXPECT_EQ(s->cancel(one), 0u) << "its only segment is in flight";
  EXPECT_EQ(s->cancel(bg + one + 100), 0u) << "unknown id";
  plan.gate->open_all();
  EXPECT_EQ(s->wait(bg).code(), StatusCode::kCancelled);
  ASSERT_TRUE(s->wait(one).is_ok());
  expect_bytes(small.data(), 3 << 20, small.size());
  const StorageStats st = s->stats();
  EXPECT_EQ(st.device_reads, 2u);
  EXPECT_EQ(st.cancelled_requests, 1u);
  EXPECT_EQ(st.failed_requests, 0u);
  // The same bytes read again afterwards arrive intact.
  ASSERT_TRUE(s->wait(s->submit(4096, background, Priority::kBackground)).is_ok());
  expect_bytes(background.data(), 4096, background.size());
}

INSTANTIATE_TEST_SUITE_P(Engines, FaultTest,
                         ::testing::Values(QueueKind::kAuto, QueueKind::kThreads),
                         [](const auto& info) {
                           return std::string(queue_kind_name(info.param)) == "auto" ? "auto"
                                                                                     : "threads";
                         });

}  // namespace
}  // namespace hypura::io
