#include "common/size.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace hypura {
namespace {

// Multiplier of a unit suffix ("", "k", "KiB", "GB"...), or 0 when unknown.
uint64_t unit_multiplier(std::string_view unit) {
  std::string u;
  for (char c : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (u.empty() || u == "b") return 1;
  static constexpr char kPrefixes[] = "kmgt";
  for (int i = 0; i < 4; ++i) {
    std::string p(1, kPrefixes[i]);
    if (u == p || u == p + "b" || u == p + "ib") return 1ull << (10 * (i + 1));
  }
  return 0;
}

}  // namespace

Result<uint64_t> parse_size(std::string_view text) {
  auto bad = [&](const char* why) {
    return invalid_argument("bad size '" + std::string(text) + "': " + why +
                            " (expected e.g. 3G, 512M, 1.5GiB)");
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t num_begin = i;
  bool seen_digit = false, seen_dot = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      seen_digit = true;
    } else if (c == '.' && !seen_dot) {
      seen_dot = true;
    } else {
      break;
    }
  }
  if (!seen_digit) return bad("no number");
  double number = std::stod(std::string(text.substr(num_begin, i - num_begin)));
  size_t unit_begin = i;
  while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string_view unit = text.substr(unit_begin, i - unit_begin);
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != text.size()) return bad("trailing text");
  uint64_t mult = unit_multiplier(unit);
  if (mult == 0) return bad("unknown unit");
  double bytes = std::round(number * static_cast<double>(mult));
  if (bytes >= 18446744073709551615.0) return bad("too large");
  return static_cast<uint64_t>(bytes);
}

std::string format_size(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf,
                v >= 100  ? "%.0f %s"
                : v >= 10 ? "%.1f %s"
                          : "%.2f %s",
                v, kUnits[u]);
  return buf;
}

}  // namespace hypura
