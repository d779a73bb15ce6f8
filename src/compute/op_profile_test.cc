// OpProfile: exclusive times of nested scopes, and the products a Context records.
#include "compute/op_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "compute/compute.h"
#include "quant/quant.h"

namespace hypura::compute {
namespace {

using std::chrono::milliseconds;

const OpStats* find(const OpProfile& p, std::string_view label) {
  static std::vector<OpProfile::Entry> entries;
  entries = p.entries();
  for (const auto& e : entries) {
    if (e.key.label() == label) return &e.stats;
  }
  return nullptr;
}

TEST(OpProfile, NestedScopesCountTheirOwnTimeOnly) {
  OpProfile p;
  const auto t0 = std::chrono::steady_clock::now();
  {
    OpProfile::Scope outer(&p, {"outer"});
    std::this_thread::sleep_for(milliseconds(2));
    {
      OpProfile::Scope inner(&p, {"inner"}, 10);
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const OpStats* outer = find(p, "outer");
  const OpStats* inner = find(p, "inner");
  ASSERT_NE(outer, nullptr);
  ASSERT_NE(inner, nullptr);
  EXPECT_GE(inner->seconds, 0.020);
  EXPECT_GE(outer->seconds, 0.002);
  // The outer scope's 20 ms of inner time is not its own.
  EXPECT_LT(outer->seconds, inner->seconds);
  EXPECT_LE(p.seconds(), wall);
  EXPECT_EQ(inner->calls, 1u);
  EXPECT_EQ(inner->macs, 10);
  EXPECT_EQ(p.entries().front().key.op, "inner");  // most time first
}

TEST(OpProfile, NullProfileRecordsNothing) {
  OpProfile::Scope off(nullptr, {"anything"});
  OpProfile p;
  EXPECT_TRUE(p.entries().empty());
}

TEST(OpProfile, LabelsNameFormatAndShape) {
  EXPECT_EQ((OpKey{"attention"}.label()), "attention");
  EXPECT_EQ((OpKey{"quantize x", gguf::GgmlType::Q8_0, 896, 0}.label()), "quantize x Q8_0 896");
  EXPECT_EQ((OpKey{"matmul", gguf::GgmlType::Q4_K, 896, 4864}.label()), "matmul Q4_K 896x4864");
}

TEST(OpProfile, ContextRecordsProductsAndQuantizationsWhileSet) {
  constexpr int64_t kCols = 64, kRows = 8, kTokens = 3;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> wf(kCols * kRows), x(kCols * kTokens), y(kRows * kTokens);
  for (auto& v : wf) v = dist(rng);
  for (auto& v : x) v = dist(rng);
  const size_t row_bytes = quant::row_size(gguf::GgmlType::Q4_0, kCols);
  std::vector<uint8_t> w(row_bytes * kRows);
  for (int64_t r = 0; r < kRows; ++r)
    quant::quantize_row_ref(gguf::GgmlType::Q4_0, wf.data() + r * kCols, w.data() + r * row_bytes,
                            kCols);
  const WeightView view{w.data(), gguf::GgmlType::Q4_0, kCols, kRows};

  Context ctx(1);
  OpProfile p;
  ctx.set_op_profile(&p);
  EXPECT_EQ(ctx.op_profile(), &p);
  ctx.matmul(view, x.data(), kTokens, y.data());
  ctx.matmul(view, x.data(), kTokens, y.data());
  ctx.set_op_profile(nullptr);
  ctx.matmul(view, x.data(), kTokens, y.data());  // not recorded

  const OpStats* product = find(p, "matmul Q4_0 64x8");
  ASSERT_NE(product, nullptr);
  EXPECT_EQ(product->calls, 2u);
  EXPECT_EQ(product->macs, 2.0 * kCols * kRows * kTokens);
  const OpStats* quantize = find(p, "quantize x Q8_0 64");
  ASSERT_NE(quantize, nullptr);
  EXPECT_EQ(quantize->calls, 2u);
  EXPECT_EQ(p.entries().size(), 2u);
}

}  // namespace
}  // namespace hypura::compute
