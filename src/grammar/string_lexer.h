// The lexer of a JSON string's contents, one byte at a time (RFC 8259 section 7).
//
// Between bytes it is in one of kStrSubCount substates: plain text, after a backslash,
// inside a \uXXXX escape, or inside a multi-byte UTF-8 character. It accepts only what a
// strict parser accepts and only well-formed UTF-8 (no overlong forms, no surrogates, no
// code point past U+10FFFF); a \u escape of a surrogate (D800-DFFF) is refused too, so
// every accepted string decodes to valid Unicode scalar values.
//
// Shared by the automaton (string values and object keys) and by the vocabulary tables
// that precompute, per substate, what each token does inside a string (token_mask.h): one
// definition, so the two can never disagree.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace hypura::grammar {

enum class StrSub : uint8_t {
  kNormal,   // between characters
  kEscape,   // after '\'
  kHex0,     // after "\u"
  kHex1,     // after "\uX", X not d/D
  kHex1D,    // after "\ud": the next digit must be 0-7 (no surrogates)
  kHex2,     // after "\uXX"
  kHex3,     // after "\uXXX"
  kCont1,    // one continuation byte 80-BF left
  kCont2,    // two left, the next 80-BF
  kCont2E0,  // two left after E0, the next A0-BF (no overlong form)
  kCont2ED,  // two left after ED, the next 80-9F (no surrogate)
  kCont3,    // three left, the next 80-BF
  kCont3F0,  // three left after F0, the next 90-BF (no overlong form)
  kCont3F4,  // three left after F4, the next 80-8F (at most U+10FFFF)
};
inline constexpr int kStrSubCount = 14;

enum class StrStep : uint8_t {
  kReject,  // the byte cannot come here
  kStart,   // the byte starts a character (counted by minLength/maxLength)
  kMore,    // the byte continues the current character
  kClose,   // the closing quote (the substate is left as it was)
};

inline bool is_hex_digit(uint8_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// The byte after `s` inside a string; updates `s`.
inline StrStep str_step(StrSub& s, uint8_t c) {
  const auto in = [c](int lo, int hi) { return c >= lo && c <= hi; };
  const auto to = [&s](StrSub next, StrStep r) {
    s = next;
    return r;
  };
  switch (s) {
    case StrSub::kNormal:
      if (c == '"') return StrStep::kClose;
      if (c == '\\') return to(StrSub::kEscape, StrStep::kStart);
      if (c < 0x20) return StrStep::kReject;  // control characters must be escaped
      if (c < 0x80) return StrStep::kStart;
      if (c < 0xC2) return StrStep::kReject;  // a continuation byte, or an overlong lead
      if (c < 0xE0) return to(StrSub::kCont1, StrStep::kStart);
      if (c == 0xE0) return to(StrSub::kCont2E0, StrStep::kStart);
      if (c == 0xED) return to(StrSub::kCont2ED, StrStep::kStart);
      if (c < 0xF0) return to(StrSub::kCont2, StrStep::kStart);
      if (c == 0xF0) return to(StrSub::kCont3F0, StrStep::kStart);
      if (c < 0xF4) return to(StrSub::kCont3, StrStep::kStart);
      if (c == 0xF4) return to(StrSub::kCont3F4, StrStep::kStart);
      return StrStep::kReject;
    case StrSub::kEscape:
      if (c == 'u') return to(StrSub::kHex0, StrStep::kMore);
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
          c == 't') {
        return to(StrSub::kNormal, StrStep::kMore);
      }
      return StrStep::kReject;
    case StrSub::kHex0:
      if (!is_hex_digit(c)) return StrStep::kReject;
      return to(c == 'd' || c == 'D' ? StrSub::kHex1D : StrSub::kHex1, StrStep::kMore);
    case StrSub::kHex1:
      return is_hex_digit(c) ? to(StrSub::kHex2, StrStep::kMore) : StrStep::kReject;
    case StrSub::kHex1D:
      return in('0', '7') ? to(StrSub::kHex2, StrStep::kMore) : StrStep::kReject;
    case StrSub::kHex2:
      return is_hex_digit(c) ? to(StrSub::kHex3, StrStep::kMore) : StrStep::kReject;
    case StrSub::kHex3:
      return is_hex_digit(c) ? to(StrSub::kNormal, StrStep::kMore) : StrStep::kReject;
    case StrSub::kCont1:
      return in(0x80, 0xBF) ? to(StrSub::kNormal, StrStep::kMore) : StrStep::kReject;
    case StrSub::kCont2:
      return in(0x80, 0xBF) ? to(StrSub::kCont1, StrStep::kMore) : StrStep::kReject;
    case StrSub::kCont2E0:
      return in(0xA0, 0xBF) ? to(StrSub::kCont1, StrStep::kMore) : StrStep::kReject;
    case StrSub::kCont2ED:
      return in(0x80, 0x9F) ? to(StrSub::kCont1, StrStep::kMore) : StrStep::kReject;
    case StrSub::kCont3:
      return in(0x80, 0xBF) ? to(StrSub::kCont2, StrStep::kMore) : StrStep::kReject;
    case StrSub::kCont3F0:
      return in(0x90, 0xBF) ? to(StrSub::kCont2, StrStep::kMore) : StrStep::kReject;
    case StrSub::kCont3F4:
      return in(0x80, 0x8F) ? to(StrSub::kCont2, StrStep::kMore) : StrStep::kReject;
  }
  return StrStep::kReject;
}

}  // namespace hypura::grammar
