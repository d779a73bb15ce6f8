#include "common/log.h"

#include <cstdio>

namespace hypura {
namespace {

void append_hex(std::string& out, const char* format, unsigned value) {
  char buf[8];
  std::snprintf(buf, sizeof buf, format, value);
  out += buf;
}

// Length of the well-formed UTF-8 sequence at s[i] (2..4), or 0 if it is not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

std::string log_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      append_hex(out, "\\x%02x", c);
    } else if (c >= 0x80) {
      const size_t n = utf8_length(text, i);
      const auto next = n ? static_cast<unsigned char>(text[i + 1]) : 0u;
      if (n == 0) {
        append_hex(out, "\\x%02x", c);
      } else if (c == 0xC2 && next < 0xA0) {  // U+0080..U+009F: C1 controls (CSI is U+009B)
        append_hex(out, "\\u%04x", next);
      } else {
        out.append(text.substr(i, n));
      }
      i += n ? n : 1;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

}  // namespace hypura
