#include "common/size.h"

#include <gtest/gtest.h>

namespace hypura {
namespace {

TEST(ParseSize, BinaryUnitsInAnySpelling) {
  EXPECT_EQ(*parse_size("3G"), 3ull << 30);
  EXPECT_EQ(*parse_size("3GB"), 3ull << 30);
  EXPECT_EQ(*parse_size("3gib"), 3ull << 30);
  EXPECT_EQ(*parse_size("512M"), 512ull << 20);
  EXPECT_EQ(*parse_size("64k"), 64ull << 10);
  EXPECT_EQ(*parse_size("2T"), 2ull << 40);
  EXPECT_EQ(*parse_size("1.5G"), 3ull << 29);
  EXPECT_EQ(*parse_size("4096"), 4096u);
  EXPECT_EQ(*parse_size("4096B"), 4096u);
  EXPECT_EQ(*parse_size(" 7M "), 7ull << 20);
}

TEST(ParseSize, RejectsGarbageWithTheText) {
  for (const char* bad : {"", "G", "-3G", "3X", "3 G extra", "1e3", "99999999999T"}) {
    auto r = parse_size(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("bad size"), std::string::npos);
  }
}

TEST(FormatSize, ThreeSignificantDigits) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(1023), "1023 B");
  EXPECT_EQ(format_size(1536), "1.50 KiB");
  EXPECT_EQ(format_size(3ull << 30), "3.00 GiB");
  EXPECT_EQ(format_size(40ull << 30), "40.0 GiB");
  EXPECT_EQ(format_size(512ull << 20), "512 MiB");
}

}  // namespace
}  // namespace hypura
