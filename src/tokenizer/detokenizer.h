// StreamingDetokenizer: turns generated ids, one at a time, into printable UTF-8.
//
// A token's bytes may end inside a multi-byte character (SPM <0xNN> byte tokens,
// byte-level BPE pieces), so push() returns only the complete prefix of what has
// arrived and holds back at most 3 bytes of an unfinished character until the next
// token completes it. Bytes that can never become valid UTF-8 come out as U+FFFD, so
// everything returned is valid UTF-8. flush() ends the stream.
//
// Thread-safety: one instance per stream, used by one thread. Holds a reference to the
// Tokenizer, which must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace hypura::tokenizer {

class StreamingDetokenizer {
 public:
  // special: print control tokens' text (e.g. "<|im_end|>") instead of nothing.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool special = false)
      : tokenizer_(tokenizer), special_(special) {}

  // Text that became complete with token `id` (often empty while a character is split).
  std::string push(int32_t id);
  // Whatever is held back, with an unfinished character replaced by U+FFFD.
  std::string flush();
  // Drops held-back bytes (e.g. at the start of a new reply).
  void reset() { pending_.clear(); }
  // Bytes held back right now (0-3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool special_;
  std::string pending_;  // bytes received but not yet returned
};

}  // namespace hypura::tokenizer
