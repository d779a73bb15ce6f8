// ToolCallParser: splits a model's reply, as it streams, into text and tool calls.
//
// Parses the Hermes / Qwen2.5 format that Qwen2.5's chat template asks for:
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
// Text outside the tags is the reply's content; each tagged JSON object with a string
// "name" is one call ("arguments" an object, or a JSON string holding one; absent: {}).
// A tag's body that is not such an object is passed on as text, tags included, so
// nothing the model wrote is lost. Small models often write the call without its tags,
// or in a Markdown code block (Qwen2.5-Coder-0.5B does both): a reply that is, as a whole,
// one such object or an array of them (fenced or not), naming only offered tools with
// arguments that validate against their schemas, is taken as calls; so a reply whose
// first non-blank byte is '{' or '[', or whose opening fence line is followed by one, is
// held back to its end. Text that might be
// the start of "<tool_call>" is held back until it is known not to be (as stop strings are), so a
// client never sees half a tag.
//
// Thread-safety: one instance per reply, used by one thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/json_schema.h"
#include "server/reply_parser.h"

namespace hypura::server {

// A tool the request offers: its name, and its parameters' schema compiled (null when it
// has none or uses a keyword the compiler does not support: then any object passes).
struct OfferedTool {
  std::string name;
  std::shared_ptr<const grammar::Grammar> parameters;
};

// The request's "tools" (OpenAI's shape, validated by the request parser) as OfferedTools.
std::vector<OfferedTool> offered_tools(const std::string& tools_json);

class ToolCallParser final : public ReplyParser {
 public:
  using Output = ReplyPieces;
  // tools: what a bare JSON call must name and validate against.
  explicit ToolCallParser(std::vector<OfferedTool> tools = {}) : tools_(std::move(tools)) {}

  Output push(std::string_view piece) override;
  // The end of the reply: held-back text, and a call whose closing tag never came if its
  // body is a complete object (models often end with EOS instead of </tool_call>).
  Output finish() override;

 private:
  void drain(Output* out);
  bool bare_calls(std::vector<ToolCall>* calls) const;  // the held reply as bare JSON calls

  bool decide_bare();  // at the reply's start: false while undecided
  bool offered(const ToolCall& call) const;

  std::vector<OfferedTool> tools_;
  bool at_start_ = true;  // nothing but whitespace so far
  bool bare_ = false;     // the reply began with '{' or '[' (after a fence): held to the end

  std::string buffer_;  // text not yet returned (after "<tool_call>" while in_call_)
  bool in_call_ = false;
};

// The call in a tag's body, or false when the body is not a call object.
bool parse_tool_call(std::string_view body, ToolCall* call);

}  // namespace hypura::server
