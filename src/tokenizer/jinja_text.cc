// Jinja subset, text helpers: Python's view of strings (codepoints, case mapping) and of
// values as text (repr, json.dumps). Every builder takes a byte cap and fails past it,
// so a hostile template cannot grow one string without bound.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>

#include "tokenizer/jinja_internal.h"
#include "tokenizer/unicode.h"

namespace hypura::tokenizer::jinja_detail {
namespace {

void check_size(uint64_t size, size_t max_bytes) {
  if (size > max_bytes) fail_limit("a string grew past " + std::to_string(max_bytes) + " bytes");
}

void repr_into(const Json& j, size_t max_bytes, std::string& out) {
  if (j.is_string()) {
    out += '\'';
    for (char c : j.get_ref<const std::string&>()) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    out += '\'';
  } else if (j.is_structured()) {
    out += j.is_array() ? "[" : "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      if (j.is_object()) {
        repr_into(Json(it.key()), max_bytes, out);
        out += ": ";
      }
      repr_into(*it, max_bytes, out);
      check_size(out.size(), max_bytes);
    }
    out += j.is_array() ? "]" : "}";
  } else if (j.is_null()) {
    out += "None";
  } else if (j.is_boolean()) {
    out += j.get<bool>() ? "True" : "False";
  } else if (j.is_number_integer()) {
    out += std::to_string(j.get<int64_t>());
  } else {
    out += python_float(j.get<double>());
  }
  check_size(out.size(), max_bytes);
}

}  // namespace

void fail_limit(const std::string& msg) {
  throw LimitError(msg);
}

// Invalid UTF-8 bytes map to U+DC80..U+DCFF and back (Python's surrogateescape), so
// content survives unchanged.
std::vector<uint32_t> to_cps(std::string_view s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    const size_t len = utf8_len(b);
    bool ok = len > 1 && i + len <= s.size();
    uint32_t cp = b & (0xFF >> (len + 1));
    for (size_t k = 1; ok && k < len; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      ok = (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (len == 1 && b < 0x80) {
      cps.push_back(b);
      ++i;
    } else if (ok) {
      cps.push_back(cp);
      i += len;
    } else {
      cps.push_back(0xDC00 + b);
      ++i;
    }
  }
  return cps;
}

std::string from_cps(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < std::min(end, cps.size()); ++i) {
    if (cps[i] >= 0xDC80 && cps[i] <= 0xDCFF)
      out += static_cast<char>(cps[i] - 0xDC00);
    else
      append_utf8(out, cps[i]);
  }
  return out;
}

// Case mapping for ASCII, Latin-1, Latin Extended-A pairs, Greek and Cyrillic; other
// scripts are left unchanged.
uint32_t case_map(uint32_t c, bool upper) {
  auto shift = [&](uint32_t lo_first, uint32_t lo_last, int32_t delta) -> std::optional<uint32_t> {
    if (upper && c >= lo_first && c <= lo_last) return c - delta;
    if (!upper && c >= lo_first - delta && c <= lo_last - delta) return c + delta;
    return std::nullopt;
  };
  if (c < 0x80) {
    if (upper && c >= 'a' && c <= 'z') return c - 32;
    if (!upper && c >= 'A' && c <= 'Z') return c + 32;
    return c;
  }
  if (c == 0xD7 || c == 0xF7) return c;
  if (auto r = shift(0xE0, 0xFE, 32)) return *r;
  if (c == 0xFF && upper) return 0x178;
  if (c == 0x178 && !upper) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {  // Latin Extended-A: adjacent upper/lower pairs
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    const bool paired =
        (c <= 0x137 && c != 0x130 && c != 0x131) || odd_upper || (c >= 0x14A && c <= 0x177);
    if (!paired) return c;
    const bool is_upper = (c % 2 == 1) == odd_upper;
    if (upper && !is_upper) return c - 1;
    if (!upper && is_upper) return c + 1;
    return c;
  }
  if (c == 0x3C2) return upper ? 0x3A3 : c;  // final sigma
  if (auto r = shift(0x3B1, 0x3C9, 32)) return *r;
  if (auto r = shift(0x430, 0x44F, 32)) return *r;
  if (auto r = shift(0x450, 0x45F, 80)) return *r;
  return c;
}

std::string python_float(double d) {
  char buf[64];
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e16) {
    std::snprintf(buf, sizeof(buf), "%.1f", d);
    return buf;
  }
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr);
}

std::string py_repr(const Json& j, size_t max_bytes) {
  std::string out;
  repr_into(j, max_bytes, out);
  return out;
}

std::string to_text(const Json& j, size_t max_bytes) {
  if (j.is_string()) return j.get<std::string>();
  return py_repr(j, max_bytes);
}

// json.dumps(x, ensure_ascii=False, indent=indent) as transformers' tojson filter does.
void dump_json(const Json& j, int64_t indent, size_t depth, size_t max_bytes, std::string& out) {
  const char* item_sep = indent >= 0 ? "," : ", ";
  auto newline = [&](size_t d) {
    if (indent < 0) return;
    // indent < 2^31 and d <= kMaxValueDepth, so neither this nor the sum overflows.
    const uint64_t pad = static_cast<uint64_t>(indent) * d;
    check_size(out.size() + 1 + pad, max_bytes);
    out += '\n';
    out.append(static_cast<size_t>(pad), ' ');
  };
  if (j.is_structured()) {
    if (j.empty()) {
      out += j.is_object() ? "{}" : "[]";
      return;
    }
    out += j.is_object() ? '{' : '[';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += item_sep;
      first = false;
      newline(depth + 1);
      if (j.is_object())
        out += Json(it.key()).dump(-1, ' ', false, Json::error_handler_t::replace) + ": ";
      dump_json(*it, indent, depth + 1, max_bytes, out);
      check_size(out.size(), max_bytes);
    }
    newline(depth);
    out += j.is_object() ? '}' : ']';
  } else if (j.is_number_float()) {
    out += python_float(j.get<double>());
  } else {
    out += j.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  check_size(out.size(), max_bytes);
}

}  // namespace hypura::tokenizer::jinja_detail
