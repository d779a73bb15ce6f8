#include "tiers/memory_ledger.h"

#include <gtest/gtest.h>

namespace hypura::tiers {
namespace {

TEST(MemoryLedger, ChargesAndRefusesOverBudget) {
  MemoryLedger ledger(1000);
  auto a = ledger.reserve(MemoryKind::kKvCache, 600, "kv cache");
  ASSERT_TRUE(a.is_ok());
  auto b = ledger.reserve(MemoryKind::kWork, 500, "work buffers");
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("work buffers"), std::string::npos);
  EXPECT_EQ(ledger.used(), 600u);
  EXPECT_EQ(ledger.available(), 400u);
  {
    Reservation moved = std::move(a).value();
    EXPECT_EQ(moved.bytes(), 600u);
  }
  EXPECT_EQ(ledger.used(), 0u);
  EXPECT_EQ(ledger.snapshot().peak, 600u);
}

TEST(MemoryLedger, AllocatesAlignedMemoryAndUnchargesOnFree) {
  MemoryLedger ledger(1 << 20);
  {
    auto buf = ledger.allocate(MemoryKind::kStreamPool, 10000, "slot");
    ASSERT_TRUE(buf.is_ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.value().data()) % 4096, 0u);
    EXPECT_EQ(buf.value().size(), 10000u);
    buf.value().data()[9999] = 1;  // writable
    const LedgerSnapshot s = ledger.snapshot();
    EXPECT_EQ(s.by_kind[static_cast<int>(MemoryKind::kStreamPool)], 10000u);
    EXPECT_NE(ledger.summary().find("stream_pool"), std::string::npos);
    EXPECT_FALSE(ledger.allocate(MemoryKind::kResidentWeights, 1 << 20, "weights").is_ok());
  }
  EXPECT_EQ(ledger.used(), 0u);
}

TEST(MemoryLedger, UnlimitedStillCounts) {
  MemoryLedger ledger(0);
  auto r = ledger.reserve(MemoryKind::kProcess, uint64_t{1} << 40, "huge");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(ledger.used(), uint64_t{1} << 40);
}

TEST(MemoryLedger, ReadsRss) {
  EXPECT_GT(current_rss_bytes(), 0u);
  EXPECT_GE(peak_rss_bytes(), current_rss_bytes());
}

}  // namespace
}  // namespace hypura::tiers
