// UTF-8 helpers and GPT-2's byte <-> unicode mapping, shared by the tokenizers.
//
// Byte-level BPE vocabularies store every byte as a printable codepoint so that merges
// and token texts never contain raw control bytes or spaces: bytes 0x21-0x7E, 0xA1-0xAC
// and 0xAE-0xFF map to themselves, the other 68 bytes to U+0100.. in byte order.
//
// Thread-safety: all functions are pure; the tables are built once, thread-safely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hypura::tokenizer {

// Length of the UTF-8 sequence that starts with `lead` (1 for continuation or invalid
// bytes, so a scan always advances).
inline size_t utf8_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Appends the UTF-8 encoding of codepoint `cpt` (REQUIRES: cpt <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cpt);

// The UTF-8 text (2 or 1 codepoint bytes) that byte-level BPE uses for byte `b`.
const std::string& byte_to_bpe_char(uint8_t b);

// Decodes a byte-level BPE token text back to raw bytes. Codepoints outside the
// mapping are copied through unchanged (they cannot come from a well-formed vocab).
std::string bpe_text_to_bytes(std::string_view text);

// Length of the longest prefix of `bytes` that does not end inside a multi-byte
// sequence that could still be completed by more bytes. Invalid bytes count as complete
// (they will never become valid), so the held-back tail is at most 3 bytes.
size_t utf8_complete_prefix(std::string_view bytes);

// Replaces invalid UTF-8 in `bytes` with U+FFFD so the result is always valid UTF-8.
std::string utf8_sanitize(std::string_view bytes);

}  // namespace hypura::tokenizer
