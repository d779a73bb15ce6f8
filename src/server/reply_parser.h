// ReplyParser: splits a model's reply, as it streams, into content, reasoning and tool
// calls. One format per implementation: ToolCallParser (Hermes/Qwen2.5 <tool_call> tags,
// tool_calls.h) and HarmonyParser (gpt-oss's channels, harmony.h). A request gets one when
// the model's format needs parsing; otherwise the reply is content as it comes.
//
// Thread-safety: one instance per reply, used by one thread.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hypura::server {

struct ToolCall {
  std::string name;
  nlohmann::json arguments = nlohmann::json::object();
};

// What a piece of the reply turned out to be, once known.
struct ReplyPieces {
  std::string text;             // content that is final now
  std::string thinking;         // reasoning that is final now (harmony's analysis channel)
  std::vector<ToolCall> calls;  // calls completed by this piece
};

class ReplyParser {
 public:
  virtual ~ReplyParser() = default;
  virtual ReplyPieces push(std::string_view piece) = 0;
  // The end of the reply: what was held back, and a call cut short by the end of generation
  // (its end marker is an end-of-generation token, never printed) if its body is complete.
  virtual ReplyPieces finish() = 0;
};

// Length of the longest suffix of `text` that is a proper prefix of `marker`: text a client
// must not see yet, since the next piece may complete the marker.
inline size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace hypura::server
