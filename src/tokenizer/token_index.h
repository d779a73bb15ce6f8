// TokenIndex: token text -> id, looked up with string_views (no allocation per lookup).
//
// Keys are views into the token strings, which must outlive the index and not change.
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hypura::tokenizer {

class TokenIndex {
 public:
  TokenIndex() = default;
  // When a text occurs twice the later id wins, as in llama.cpp.
  // REQUIRES: `tokens` outlives the index and is not modified.
  explicit TokenIndex(const std::vector<std::string>& tokens) {
    map_.reserve(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) map_[tokens[i]] = static_cast<int32_t>(i);
  }

  // The id of the token whose text is exactly `text`, or -1.
  int32_t find(std::string_view text) const {
    auto it = map_.find(text);
    return it == map_.end() ? -1 : it->second;
  }

 private:
  std::unordered_map<std::string_view, int32_t> map_;
};

}  // namespace hypura::tokenizer
