// Byte sizes as people type and read them: "3G", "512M", "1.5GiB" <-> bytes.
//
// Units are binary (K = 1024, M = 1024^2, G = 1024^3, T = 1024^4), whatever the spelling
// ("3G", "3GB", "3GiB", "3g" all mean 3 * 2^30): budgets compare against RAM sizes the
// kernel reports in binary units. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace hypura {

// Parses "<number>[unit]" where number may have a fraction ("1.5G") and unit is one of
// B, K, M, G, T (optionally followed by "B" or "iB", any case). A bare number is bytes.
// Returns kInvalidArgument naming the text when it is empty, negative, has an unknown
// unit or overflows 64 bits.
Result<uint64_t> parse_size(std::string_view text);

// "0 B", "512.0 KiB", "3.00 GiB": three significant digits, binary units.
std::string format_size(uint64_t bytes);

inline constexpr uint64_t kKiB = 1ull << 10;
inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr uint64_t kGiB = 1ull << 30;

}  // namespace hypura
