// Byte-level BPE pre-tokenizer: splits text into words with the regexes of a
// tokenizer.ggml.pre family, through PCRE2 (UTF + UCP, so \p{L}, \s are Unicode-aware).
//
// Regexes apply in sequence, each to every piece the previous one produced; within a
// piece both the matches and the text between them become pieces (nothing is dropped),
// which is how llama.cpp's unicode_regex_split composes them. `$` matches only at the
// end of a piece.
//
// Thread-safety: immutable after create(); split() may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace hypura::tokenizer {

class PreTokenizer {
 public:
  // The regexes for a tokenizer.ggml.pre name; unknown names get llama.cpp's default
  // list. `ignore_merges` is set for families whose words that are whole tokens skip
  // the merges (llama3).
  static std::vector<std::string> regexes_for(const std::string& pre, bool* ignore_merges);

  static Result<std::unique_ptr<PreTokenizer>> create(const std::vector<std::string>& regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Pieces of `text` as (byte offset, byte length), in order, covering all of it.
  // REQUIRES: `text` is valid UTF-8.
  std::vector<std::pair<size_t, size_t>> split(std::string_view text) const;

 private:
  PreTokenizer() = default;
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace hypura::tokenizer
