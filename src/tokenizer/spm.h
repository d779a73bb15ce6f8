// SentencePiece-style (BPE by score) encoding of one run of plain text, as llama.cpp's
// SPM tokenizer does it for tokenizer.ggml.model == "llama" (Llama 2, Gemma, Phi-3).
//
// The text is split into UTF-8 characters; adjacent pieces whose concatenation is a
// token are merged, highest token score first (ties: leftmost), until no pair is a
// token. A piece that is not a token falls back to its bytes as <0xNN> tokens.
// Whitespace escaping ("▁") and the space prefix are the caller's job (tokenizer.cc).
//
// Cost: O(n log n) in characters, with a priority queue over a linked list of pieces.
// Thread-safety: immutable after construction; encode() may run concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/token_index.h"
#include "tokenizer/vocab.h"

namespace hypura::tokenizer {

class SpmEncoder {
 public:
  // REQUIRES: `vocab` and `index` outlive the encoder.
  SpmEncoder(const Vocab& vocab, const TokenIndex& index);

  // Appends the ids of `text` (already whitespace-escaped) to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  float score(int32_t id) const;

  const Vocab& vocab_;
  const TokenIndex& index_;
  std::array<int32_t, 256> byte_tokens_;  // <0xNN> ids; the unknown id where missing
};

}  // namespace hypura::tokenizer
