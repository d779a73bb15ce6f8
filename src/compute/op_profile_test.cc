// OpProfile: exclusive times of nested scopes, and the products a Context records.
#include "compute/op_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "compute/compute.h"
#include "quant/quant.h"

namespace hypura::compute {
namespace {

using std::chrono::milliseconds;

// The stats of the op labelled `label`, if the profile has it.
std::optional<OpStats> find(const OpProfile& p, std::string_view label) {
  for (const auto& e : p.entries()) {
    if (e.key.label() == label) return e.stats;
  }
  return std::nullopt;
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
  const std::optional<OpStats> outer = find(p, "outer");
  const std::optional<OpStats> inner = find(p, "inner");
  ASSERT_TRUE(outer.has_value());
  ASSERT_TRUE(inner.has_value());
  EXPECT_GE(inner->seconds, 0.020);
  EXPECT_GE(outer->seconds, 0.002);
  // Had the outer scope counted the inner one's time too, the two would add up to more
  // than the wall time (whatever the sleeps overshoot by on a loaded machine).
  EXPECT_LE(outer->seconds + inner->seconds, wall);
  EXPECT_EQ(p.seconds(), outer->seconds + inner->seconds);
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
  // The context counts every product's multiply-accumulates, profiled or not, shared too.
  const uint64_t one = kCols * kRows * kTokens;
  EXPECT_EQ(ctx.macs(), 3 * one);
  const WeightView* both[] = {&view, &view};
  std::vector<float> y2(y.size());
  float* outs[] = {y.data(), y2.data()};
  ctx.matmul_shared(both, outs, 2, x.data(), kTokens);
  EXPECT_EQ(ctx.macs(), 5 * one);

  const std::optional<OpStats> product = find(p, "matmul Q4_0 64x8");
  ASSERT_TRUE(product.has_value());
  EXPECT_EQ(product->calls, 2u);
  EXPECT_EQ(product->macs, 2.0 * kCols * kRows * kTokens);
  const std::optional<OpStats> quantize = find(p, "quantize x Q8_0 64");
  ASSERT_TRUE(quantize.has_value());
  EXPECT_EQ(quantize->calls, 2u);
  EXPECT_EQ(p.entries().size(), 2u);
}

}  // namespace
}  // namespace hypura::compute
