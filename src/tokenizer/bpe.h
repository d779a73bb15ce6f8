// Byte-level BPE encoding (tokenizer.ggml.model == "gpt2": GPT-2, Llama 3, Qwen2,
// SmolLM, DeepSeek), as llama.cpp does it.
//
// Text is split into words by the PreTokenizer of the vocab's tokenizer.ggml.pre; each
// word's bytes are mapped to GPT-2's printable codepoints (unicode.h) and merged pairwise,
// lowest merge rank first (ties: leftmost), until no adjacent pair has a merge.
//
// Merges are indexed by the ids of their two halves. A merge whose halves are not both
// tokens is dropped at load (well-formed vocabularies have none).
// Cost: O(n log n) per word, with a priority queue over a linked list of symbols.
// Thread-safety: immutable after create(); encode() may run concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/token_index.h"
#include "tokenizer/vocab.h"

namespace hypura::tokenizer {

class BpeEncoder {
 public:
  // REQUIRES: `index` outlives the encoder.
  static Result<std::unique_ptr<BpeEncoder>> create(const Vocab& vocab, const TokenIndex& index);

  // Appends the ids of `text` to `out`. REQUIRES: `text` is valid UTF-8.
  void encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  explicit BpeEncoder(const TokenIndex& index) : index_(index) {}
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

  struct Merge {
    int32_t rank;
    int32_t merged;  // id of left+right, or -1 when that text is not a token
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  const TokenIndex& index_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left id, right id) -> merge
  std::array<int32_t, 256> byte_ids_{};         // id of each byte's mapped char, or -1
  bool ignore_merges_ = false;  // llama3: a word that is a whole token is taken as is
};

}  // namespace hypura::tokenizer
