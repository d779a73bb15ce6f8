#include "tokenizer/spm.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <queue>
#include <string>

#include "tokenizer/unicode.h"

namespace hypura::tokenizer {
namespace {

// A piece of the text; merged pieces keep the left index and zero the right one.
struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t offset;  // bytes into the text
  uint32_t length;  // bytes; 0 once merged into its left neighbour
};

struct Bigram {
  int32_t left;
  int32_t right;
  float score;
  uint32_t length;  // bytes of left + right when queued, to detect stale entries

  // Max-heap order: highest score first, then leftmost.
  bool operator<(const Bigram& o) const {
    return score < o.score || (score == o.score && left > o.left);
  }
};

// One symbol per UTF-8 character (a truncated sequence at the end is one symbol).
std::vector<Symbol> split_chars(std::string_view text) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(text.size() - off, utf8_len(static_cast<uint8_t>(text[off])));
    const auto idx = static_cast<int32_t>(symbols.size());
    const int32_t next = off + len == text.size() ? -1 : idx + 1;
    symbols.push_back({idx - 1, next, static_cast<uint32_t>(off), static_cast<uint32_t>(len)});
    off += len;
  }
  return symbols;
}

// Merges adjacent symbols whose concatenation is a token, highest score first (ties:
// leftmost), until no adjacent pair is a token. score_of(text) -> optional<float>.
template <typename ScoreOf>
void merge_by_score(std::string_view text, std::vector<Symbol>& symbols, ScoreOf score_of) {
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t len = symbols[left].length + symbols[right].length;
    if (auto score = score_of(text.substr(symbols[left].offset, len))) {
      queue.push({left, right, *score, len});
    }
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.length == 0 || r.length == 0 || l.length + r.length != b.length) continue;  // stale
    l.length += r.length;
    r.length = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
}

}  // namespace

SpmEncoder::SpmEncoder(const Vocab& vocab, const TokenIndex& index) : vocab_(vocab), index_(index) {
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    int32_t id = index_.find(hex);
    if (id < 0) id = index_.find(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = id >= 0 ? id : vocab_.unk_id;
  }
}

float SpmEncoder::score(int32_t id) const {
  return vocab_.scores.empty() ? 0.0f : vocab_.scores[id];
}

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols = split_chars(text);
  merge_by_score(text, symbols, [this](std::string_view piece) -> std::optional<float> {
    const int32_t id = index_.find(piece);
    if (id < 0) return std::nullopt;
    return score(id);
  });
  for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].offset, symbols[i].length);
    const int32_t id = index_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {  // not a token: byte fallback
      const int32_t byte_id = byte_tokens_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
}

}  // namespace hypura::tokenizer
