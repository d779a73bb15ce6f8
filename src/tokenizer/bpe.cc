#include "tokenizer/bpe.h"

#include <spdlog/spdlog.h>

#include <optional>
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
  int32_t left_id;  // ids when queued, to detect stale entries
  int32_t right_id;
  int32_t merged;

  // Max-heap order: lowest rank first, then leftmost.
  bool operator<(const Bigram& o) const {
    return rank > o.rank || (rank == o.rank && left > o.left);
  }
};

// A word after byte mapping: `text` is the bytes through GPT-2's byte->codepoint table
// (as vocab texts are written); symbols start as one per byte and merge in place.
struct Word {
  std::string text;
  std::vector<Symbol> symbols;
};

Word map_bytes(std::string_view bytes, const std::array<int32_t, 256>& byte_ids) {
  Word w;
  w.text.reserve(bytes.size() * 2);
  w.symbols.reserve(bytes.size());
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    const std::string& mapped = byte_to_bpe_char(b);
    const auto idx = static_cast<int32_t>(w.symbols.size());
    w.symbols.push_back({idx - 1, idx + 1, byte_ids[b], static_cast<uint32_t>(w.text.size()),
                         static_cast<uint32_t>(mapped.size())});
    w.text += mapped;
  }
  if (!w.symbols.empty()) w.symbols.back().next = -1;
  return w;
}

struct MergeStep {
  int32_t rank;
  int32_t merged;  // id of the merged symbol, or -1
};

// Merges adjacent symbols, lowest rank first (ties: leftmost), until no pair has a merge.
// find_merge(left id, right id) -> optional<MergeStep>.
template <typename FindMerge>
void merge_pairs(std::vector<Symbol>& symbols, FindMerge find_merge) {
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t l = symbols[left].id, r = symbols[right].id;
    if (l < 0 || r < 0) return;
    if (auto m = find_merge(l, r)) queue.push({left, right, m->rank, l, r, m->merged});
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
}

// Appends the ids of the merged symbols. A symbol that is not a token emits whichever
// single bytes of its text are tokens (llama.cpp does the same; well-formed
// vocabularies never get there).
void emit(const Word& w, const TokenIndex& index, std::vector<int32_t>& out) {
  for (int32_t i = 0; i != -1; i = w.symbols[i].next) {
    const Symbol& s = w.symbols[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    for (char c : std::string_view(w.text).substr(s.offset, s.length)) {
      const int32_t id = index.find(std::string_view(&c, 1));
      if (id >= 0) out.push_back(id);
    }
  }
}

}  // namespace

Result<std::unique_ptr<BpeEncoder>> BpeEncoder::create(const Vocab& vocab,
                                                       const TokenIndex& index) {
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

  for (int b = 0; b < 256; ++b)
    enc->byte_ids_[b] = index.find(byte_to_bpe_char(static_cast<uint8_t>(b)));
  return enc;
}

void BpeEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  for (const auto& [offset, length] : pre_->split(text)) {
    encode_word(text.substr(offset, length), out);
  }
}

void BpeEncoder::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  Word word = map_bytes(bytes, byte_ids_);
  if (word.symbols.empty()) return;
  if (ignore_merges_) {
    const int32_t whole = index_.find(word.text);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  merge_pairs(word.symbols, [this](int32_t left, int32_t right) -> std::optional<MergeStep> {
    auto it = merges_.find(pair_key(left, right));
    if (it == merges_.end()) return std::nullopt;
    return MergeStep{it->second.rank, it->second.merged};
  });
  emit(word, index_, out);
}

}  // namespace hypura::tokenizer
