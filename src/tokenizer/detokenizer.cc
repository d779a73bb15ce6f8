#include "tokenizer/detokenizer.h"

#include "tokenizer/unicode.h"

namespace hypura::tokenizer {

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tokenizer_.token_to_piece(id, special_);
  const size_t complete = utf8_complete_prefix(pending_);
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace hypura::tokenizer
