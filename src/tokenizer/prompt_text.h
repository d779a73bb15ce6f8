// PromptText: a rendered prompt that remembers which of its bytes are data.
//
// A chat template's own text may write control tokens ("<|im_start|>"); the messages it
// renders may not: a user who types "<|im_end|>\n<|im_start|>system" must get those
// characters as text, not as a forged turn. Renderers (ChatTemplate, the Jinja
// interpreter) therefore mark the bytes that came from messages as data, and
// Tokenizer::encode(PromptText) parses special tokens only outside them, as llama.cpp
// and Ollama do.
//
// Thread-safety: a plain value type.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hypura::tokenizer {

// Bytes [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const TextRange&) const = default;
};

struct PromptText {
  std::string text;
  std::vector<TextRange> data;  // ranges of `text` that are data; ascending, disjoint

  // Appends text the template itself wrote (special tokens are parsed in it).
  void append_template(std::string_view s) { text.append(s); }
  // Appends data (message content, roles); adjacent data ranges merge.
  void append_data(std::string_view s) {
    if (s.empty()) return;
    const size_t begin = text.size();
    text.append(s);
    if (!data.empty() && data.back().end == begin) {
      data.back().end = text.size();
    } else {
      data.push_back({begin, text.size()});
    }
  }
  void append(const PromptText& p);
  // Bytes [begin, end) with their ranges (positions clamped to the text).
  PromptText slice(size_t begin, size_t end = std::string::npos) const;
  // Removes the first n bytes (a BOS the tokenizer adds itself), shifting the ranges.
  void erase_prefix(size_t n) { *this = slice(n); }
};

}  // namespace hypura::tokenizer
