// ChatTemplate: renders a conversation into the prompt text a chat model was trained on.
//
// Models ship a Jinja template (tokenizer.chat_template). Rather than interpret Jinja,
// we recognise the template's family from marker strings in its text and render with an
// explicit renderer per family, written to produce exactly what the family's reference
// templates produce (tests compare against strings derived from those templates):
//   chatml   <|im_start|>role\n...<|im_end|>\n    Qwen2/2.5/3, SmolLM2; the template's
//            built-in default system prompt is used when the conversation has none;
//            templates that know </think> (Qwen3) drop the reasoning of assistant
//            turns before the last user message
//   llama3   <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>; Llama 3.1+
//            templates' "Cutting Knowledge Date" system header included
//   gemma    <start_of_turn>user|model\n...<end_of_turn>\n; system text is prefixed to
//            the first user turn (Gemma 3)
//   llama2   [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s>
//   mistral  [INST] ... [/INST]...</s> (v0.1 style; system prefixed to the first turn)
//   phi3     <|user|>\n...<|end|>\n<|assistant|>\n (with <|system|> when the template
//            has it; Phi-3-mini's template drops system messages, and so do we)
//   zephyr   <|user|>\n...</s>\n<|assistant|>\n
// A template we do not recognise is run by a small Jinja interpreter (jinja.h); only if
// that cannot parse or render it do we fall back to chatml, with a warning. A missing
// template is chosen from the vocabulary's marker tokens (gpt-oss's harmony markers: its
// own template, which we carry: builtin_templates.h).
//
// render() returns a PromptText: the text with the bytes that came from messages (roles
// and contents) marked as data. Encode it with Tokenizer::encode(PromptText, true): the
// template's markers become their control tokens, while marker texts inside messages
// stay text, so a message cannot forge a turn. As in llama.cpp, a BOS the template writes
// first is left out when the tokenizer adds one itself (add_bos_token), so it is not
// doubled. An interpreted template runs within RenderLimits (jinja.h); going over them
// is kResourceExhausted.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/jinja.h"
#include "tokenizer/prompt_text.h"

namespace hypura::tokenizer {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // assistant: the tool calls it made, a JSON array of {"name", "arguments": object};
  // "" for none. Rendered as Hugging Face's tool_calls ([{"type": "function",
  // "function": {"name", "arguments"}}]).
  std::string tool_calls = {};
  std::string tool_name = {};  // tool: the tool whose result the content is ("name")
};

// kJinja: not a known family; the template itself is interpreted.
enum class ChatFamily { kChatml, kLlama3, kGemma, kLlama2, kMistral, kPhi3, kZephyr, kJinja };
const char* chat_family_name(ChatFamily family);

class ChatTemplate {
 public:
  // Recognises `template_text`; bos/eos are the texts of the model's BOS and EOS tokens;
  // add_bos: the tokenizer prepends BOS itself (Tokenizer::add_bos()).
  static ChatTemplate from_text(std::string_view template_text, std::string bos_text,
                                std::string eos_text, bool add_bos);
  // The tokenizer's own template, or (when it has none) a family guessed from its
  // vocabulary (<|im_start|>, <start_of_turn>, <|start_header_id|>, ...).
  static ChatTemplate for_tokenizer(const Tokenizer& tokenizer);

  ChatFamily family() const { return family_; }
  // True when the template could neither be recognised nor interpreted, so chatml is
  // used instead.
  bool is_fallback() const { return fallback_; }

  // tools: a JSON array of tool definitions (OpenAI's shape) or "". A conversation with
  // tools, tool calls or tool results is rendered by the model's own template (which
  // must handle them: supports_tools()), with `tools` as data; kUnsupported otherwise.
  // reasoning_effort: the template variable of that name ("low", "medium", "high": the
  // templates that read it, gpt-oss's, default to medium), "" for none; the explicit
  // renderers have no such setting.
  Result<PromptText> render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                            std::string_view tools = {},
                            std::string_view reasoning_effort = {}) const;

  // Whether the model's template renders tools (it is Jinja that uses `tools`).
  bool supports_tools() const { return tools_jinja_ != nullptr; }

  // The conversation with its last message, an assistant's unfinished reply, left open
  // (no end-of-turn marker) so that generation continues it: the rendering without
  // generation prompt, cut right after the reply's text (trimmed, as templates trim it),
  // as transformers' continue_final_message does. An empty reply gives the generation
  // prompt. kInvalidArgument when the template does not write the reply.
  // REQUIRES: !messages.empty().
  Result<PromptText> render_continuing(std::span<const ChatMessage> messages,
                                       std::string_view tools = {},
                                       std::string_view reasoning_effort = {}) const;

  // What render(messages) adds to render(messages[0, n_old)) (without generation
  // prompt): the text to feed after a cached earlier turn. Empty `ok` result when the
  // earlier rendering is not a prefix (then re-render everything): *prefix_ok says which.
  Result<PromptText> render_continuation(std::span<const ChatMessage> messages, size_t n_old,
                                         bool add_generation_prompt, bool* prefix_ok) const;

  // Text that closes a model turn ("<|im_end|>", "<end_of_turn>", ...), usable as a stop
  // string when the end-of-turn token is not marked end-of-generation.
  std::string end_of_turn() const;

  // Llama 3.1+ templates print today's date; tests pin it ("26 Jul 2024" format).
  void set_date_for_testing(std::string date) { date_ = std::move(date); }
  // Interpreted templates' strftime_now prints this time (seconds since the epoch, UTC).
  void set_time_for_testing(int64_t seconds) { fixed_time_ = seconds; }
  // Bounds for interpreted templates (kJinja); the defaults suit a server.
  void set_limits(const RenderLimits& limits) { limits_ = limits; }

 private:
  void render_chatml(std::span<const ChatMessage> m, bool gen, PromptText& out) const;
  void render_llama3(std::span<const ChatMessage> m, bool gen, PromptText& out) const;
  void render_gemma(std::span<const ChatMessage> m, bool gen, PromptText& out) const;
  void render_llama2(std::span<const ChatMessage> m, bool gen, PromptText& out) const;
  void render_mistral(std::span<const ChatMessage> m, bool gen, PromptText& out) const;
  void render_phi3(std::span<const ChatMessage> m, bool gen, PromptText& out) const;
  void render_zephyr(std::span<const ChatMessage> m, bool gen, PromptText& out) const;
  Result<PromptText> render_jinja(std::span<const ChatMessage> m, bool gen,
                                  std::string_view effort) const;
  Result<PromptText> render_tools(std::span<const ChatMessage> m, bool gen, std::string_view tools,
                                  std::string_view effort) const;
  Result<PromptText> run_jinja(const JinjaTemplate& t, std::span<const ChatMessage> m, bool gen,
                               std::string_view tools, std::string_view effort) const;

  ChatFamily family_ = ChatFamily::kChatml;
  std::shared_ptr<const JinjaTemplate> jinja_;        // kJinja only
  std::shared_ptr<const JinjaTemplate> tools_jinja_;  // the template, when it uses `tools`
  RenderLimits limits_;
  bool add_bos_ = false;
  bool fallback_ = false;
  std::string bos_;
  std::string eos_;
  std::string leading_bos_;            // BOS text the template writes first, unless the
                                       // tokenizer adds BOS itself; else empty
  std::string default_system_;         // chatml: the template's default system prompt
  bool llama3_date_header_ = false;    // Llama 3.1+: "Cutting Knowledge Date" system block
  std::string date_;                   // llama3 "Today Date"; empty: today
  std::optional<int64_t> fixed_time_;  // kJinja strftime_now's time; unset: now
  bool phi3_system_ = false;           // phi3: the template renders system messages
  bool strip_think_ = false;           // chatml: drop "...</think>" from earlier replies
};

}  // namespace hypura::tokenizer
