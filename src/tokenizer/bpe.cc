#include "tokenizer/bpe.h"

#include <spdlog/spdlog.h>

#include <queue>
#include <string>

#include "tokenizer/unicode.h"

namespace hypura::tokenizer {
namespace {

// One symbol of a word; merged symbols keep the left index and zero the right one.
struct Symbol {
  int32_t prev;
  int32_t next;
  int32_t id;       // token id, or -1 when the text is not a token
  uint32_t offset;  // bytes into the byte-mapped word
  uint32_t length;  // bytes; 0 once merged into its left neighbour
};

struct Bigram {
  int32_t left;
  int32_t right;
  int32_t rank;
  int32_t left_id;   // ids when queued, to detect stale entries
  int32_t right_id;
  int32_t merged;

  // Max-heap order: lowest rank first, then leftmost.
  bool operator<(const Bigram& o) const {
    return rank > o.rank || (rank == o.rank && left > o.left);
  }
};

}  // namespace

Result<std::unique_ptr<BpeEncoder>> BpeEncoder::create(const Vocab& vocab, const TokenIndex& index) {
  std::unique_ptr<BpeEncoder> enc(new BpeEncoder(index));
  const auto regexes = PreTokenizer::regexes_for(vocab.pre, &enc->ignore_merges_);
  HYPURA_ASSIGN_OR_RETURN(enc->pre_, PreTokenizer::create(regexes));

  enc->merges_.reserve(vocab.merges.size());
  size_t dropped = 0;
  std::string joined;  // left + right, reused to avoid an allocation per merge
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& m = vocab.merges[rank];
    const size_t space = m.find(' ', 1);  // a half may itself start with a space byte
    if (space == std::string::npos) {
      ++dropped;
      continue;
    }
    const std::string_view sv(m);
    const int32_t left = index.find(sv.substr(0, space));
    const int32_t right = index.find(sv.substr(space + 1));
    if (left < 0 || right < 0) {
      ++dropped;
      continue;
    }
    joined.assign(sv.substr(0, space));
    joined.append(sv.substr(space + 1));
    const int32_t merged = index.find(joined);
    // emplace keeps the first (lowest) rank when a pair is listed twice.
    enc->merges_.emplace(pair_key(left, right), Merge{static_cast<int32_t>(rank), merged});
  }
  if (dropped > 0) spdlog::warn("tokenizer: dropped {} malformed BPE merges", dropped);

  for (int b = 0; b < 256; ++b) enc->byte_ids_[b] = index.find(byte_to_bpe_char(static_cast<uint8_t>(b)));
  return enc;
}

void BpeEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  for (const auto& [offset, length] : pre_->split(text)) {
    encode_word(text.substr(offset, length), out);
  }
}

void BpeEncoder::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  // word: the bytes through GPT-2's byte->codepoint table, as vocab texts are written.
  std::string word;
  word.reserve(bytes.size() * 2);
  std::vector<Symbol> symbols;
  symbols.reserve(bytes.size());
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    const std::string& mapped = byte_to_bpe_char(b);
    const auto idx = static_cast<int32_t>(symbols.size());
    symbols.push_back({idx - 1, idx + 1, byte_ids_[b], static_cast<uint32_t>(word.size()),
                       static_cast<uint32_t>(mapped.size())});
    word += mapped;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  if (ignore_merges_) {
    const int32_t whole = index_.find(word);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }

  std::priority_queue<Bigram> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t l = symbols[left].id, r = symbols[right].id;
    if (l < 0 || r < 0) return;
    auto it = merges_.find(pair_key(l, r));
    if (it == merges_.end()) return;
    queue.push({left, right, it->second.rank, l, r, it->second.merged});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& l = symbols[bg.left];
    Symbol& r = symbols[bg.right];
    if (l.length == 0 || r.length == 0 || l.next != bg.right || l.id != bg.left_id ||
        r.id != bg.right_id) {
      continue;  // stale: one side has merged since this pair was queued
    }
    l.length += r.length;
    l.id = bg.merged;
    r.length = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    // Not a token: emit whichever single bytes of its text are tokens (llama.cpp does
    // the same; well-formed vocabularies never get here).
    for (char c : std::string_view(word).substr(s.offset, s.length)) {
      const int32_t id = index_.find(std::string_view(&c, 1));
      if (id >= 0) out.push_back(id);
    }
  }
}

}  // namespace hypura::tokenizer
