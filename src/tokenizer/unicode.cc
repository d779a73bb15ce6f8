#include "tokenizer/unicode.h"

#include <array>

namespace hypura::tokenizer {

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt < 0x80) {
    out += static_cast<char>(cpt);
  } else if (cpt < 0x800) {
    out += static_cast<char>(0xC0 | (cpt >> 6));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else if (cpt < 0x10000) {
    out += static_cast<char>(0xE0 | (cpt >> 12));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cpt >> 18));
    out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  }
}

namespace {

bool is_printable_byte(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteTables {
  std::array<std::string, 256> byte_to_char;  // UTF-8 text of each byte's codepoint
  std::array<int16_t, 512> cpt_to_byte;       // inverse; -1 where unmapped

  ByteTables() {
    uint32_t next = 256;  // ends at 256 + 68 = 324, inside cpt_to_byte
    cpt_to_byte.fill(-1);
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = is_printable_byte(b) ? static_cast<uint32_t>(b) : next++;
      append_utf8(byte_to_char[b], cpt);
      cpt_to_byte[cpt] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

// Decodes one codepoint at text[i]; returns its length, or 0 when the sequence is
// invalid (truncated, overlong, surrogate, above U+10FFFF).
size_t decode_utf8(std::string_view text, size_t i, uint32_t* cpt) {
  const auto b0 = static_cast<uint8_t>(text[i]);
  const size_t len = utf8_len(b0);
  if (len == 1) {
    *cpt = b0;
    return b0 < 0x80 ? 1 : 0;
  }
  if (i + len > text.size()) return 0;
  uint32_t c = b0 & (0xFF >> (len + 1));
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(text[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cpt = c;
  return len;
}

}  // namespace

const std::string& byte_to_bpe_char(uint8_t b) {
  return tables().byte_to_char[b];
}

std::string bpe_text_to_bytes(std::string_view text) {
  const auto& map = tables().cpt_to_byte;
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cpt = 0;
    size_t len = decode_utf8(text, i, &cpt);
    if (len == 0) {  // not UTF-8: copy the byte through
      out += text[i++];
      continue;
    }
    if (cpt < map.size() && map[cpt] >= 0) {
      out += static_cast<char>(map[cpt]);
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view bytes) {
  const size_t n = bytes.size();
  // Look back at most 3 bytes for the lead byte of an unfinished sequence.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(bytes[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation: keep looking for the lead
    const size_t len = utf8_len(b);
    return (len > back) ? n - back : n;
  }
  return n;
}

std::string utf8_sanitize(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    uint32_t cpt = 0;
    size_t len = decode_utf8(bytes, i, &cpt);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(bytes.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace hypura::tokenizer
