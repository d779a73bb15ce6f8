// The decode probe measures; timing is not asserted (a shared machine), only that every
// weight type the CPU multiplies gives a finite positive rate and a finite non-negative
// overhead, and others give none.
#include "compute/decode_probe.h"

#include <gtest/gtest.h>

#include <cmath>

#include "quant/quant.h"

namespace hypura::compute {
namespace {

TEST(DecodeProbe, RatesForEveryMultipliedTypeAndNoneForOthers) {
  Context ctx(2);
  for (gguf::GgmlType type : {gguf::GgmlType::Q4_K, gguf::GgmlType::Q6_K, gguf::GgmlType::Q8_0,
                              gguf::GgmlType::Q4_1, gguf::GgmlType::F16}) {
    const DecodeCost cost = measure_decode_cost(ctx, type, 0, 4 << 20, 0.01);
    EXPECT_GT(cost.bps, 0) << gguf::type_name(type);
    EXPECT_TRUE(std::isfinite(cost.bps)) << gguf::type_name(type);
    EXPECT_GE(cost.overhead_s, 0) << gguf::type_name(type);
    EXPECT_TRUE(std::isfinite(cost.overhead_s)) << gguf::type_name(type);
  }
  // A model's own width (SmolLM2's 576 columns), and one the format cannot hold.
  EXPECT_GT(measure_decode_cost(ctx, gguf::GgmlType::Q4_1, 576, 4 << 20, 0.01).bps, 0);
  EXPECT_EQ(measure_decode_cost(ctx, gguf::GgmlType::Q4_K, 576, 4 << 20, 0.01).bps, 0);
  ASSERT_FALSE(quant::is_supported(gguf::GgmlType::IQ2_XXS));
  EXPECT_EQ(measure_decode_cost(ctx, gguf::GgmlType::IQ2_XXS, 0, 4 << 20, 0.01).bps, 0);
}

}  // namespace
}  // namespace hypura::compute
