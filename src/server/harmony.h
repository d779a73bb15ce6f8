// HarmonyParser: gpt-oss's replies (the harmony format) split into reasoning, content and
// tool calls, as they stream.
//
// The prompt ends with "<|start|>assistant"; the model then writes messages of the form
//   <|channel|>analysis<|message|>chain of thought<|end|>
//   <|start|>assistant<|channel|>final<|message|>the answer          (then <|return|>)
// or, to call a tool,
//   <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}
// ended by <|call|>. <|return|> and <|call|> end generation and are never printed;
// <|end|> closes one message. A message's header (up to <|message|>) names its channel and
// recipient: "analysis" is reasoning, a recipient "functions.NAME" makes the body a call's
// JSON arguments, anything else ("final", a commentary preamble) is content. A reply with no
// markup at all (the model ignored the format) is content. Markup never reaches the client;
// text that may be the start of a marker is held back until it is known not to be.
//
// Thread-safety: one instance per reply, used by one thread.
#pragma once

#include <string>
#include <string_view>

#include "server/reply_parser.h"

namespace hypura::server {

class HarmonyParser final : public ReplyParser {
 public:
  ReplyPieces push(std::string_view piece) override;
  ReplyPieces finish() override;

 private:
  enum class Body { kContent, kThinking, kCall };

  void drain(ReplyPieces* out);
  bool read_header();  // false: the header is not complete yet
  void emit(std::string_view text, ReplyPieces* out);
  void end_message(ReplyPieces* out);  // a call's body becomes a ToolCall

  std::string buffer_;     // text not yet handed on
  bool at_start_ = true;   // nothing but whitespace so far: the reply may have no markup
  bool in_header_ = true;  // the reply starts in the first message's header
  Body body_ = Body::kContent;
  std::string call_name_;  // kCall: the function's name
  std::string call_body_;  // kCall: its arguments so far
};

}  // namespace hypura::server
