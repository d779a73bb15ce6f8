// A small Jinja interpreter for chat templates the explicit renderers do not recognise.
//
// Renders the subset of Jinja2 that Hugging Face chat templates use, with the settings
// transformers uses (trim_blocks, lstrip_blocks, loop controls): text, {{ }}, {% if /
// elif / else %}, {% for %} (with loop.index0/first/last/length..., else, break/continue),
// {% set %} (including namespace attributes), whitespace control (-), comments; literals,
// lists, dicts, attribute/subscript/slice access, arithmetic, comparisons, `in`, `and`/
// `or`/`not`, conditional expressions, the common filters (trim, length, tojson, join,
// default, upper, lower, ...), tests (defined, none, string, ...), string and dict
// methods (strip, split, startswith, items, get, ...), and raise_exception, namespace,
// range, strftime_now; {% macro %} with positional, keyword and default arguments,
// called as functions (recursion included; a macro sees the template's variables and
// its arguments, not its caller's). Includes, imports, call blocks, filter blocks, block
// sets and custom filters are not supported: such templates fail to parse (an error
// naming the construct) and the caller falls back.
//
// Values are JSON (nlohmann::ordered_json); `messages` and other context values are
// passed as JSON. Rendering errors (a template's raise_exception, an unsupported
// construct, a type error) come back as kInvalidArgument.
//
// Templates come from untrusted files, so every render is bounded (RenderLimits): by
// work (evaluation steps plus bytes and values created, copied or scanned), by the size
// of every string built and of the output, and by wall time. Going over a limit is
// kResourceExhausted. Integer arithmetic that would overflow is an error, not UB.
//
// Data: strings that come from the context variables named in RenderOptions::data_vars
// (the messages) are tracked through the render; the bytes of the output they produce
// are reported in PromptText::data, so that no special token is parsed inside them.
// Concatenation (~, +) keeps exact ranges; any other operation on data yields a value
// that is data as a whole (conservative: never less than the truth).
//
// Thread-safety: a parsed JinjaTemplate is immutable; render() may run concurrently.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/prompt_text.h"

namespace hypura::tokenizer {

struct RenderLimits {
  // Work units: one per evaluation step, plus one per byte of a string and kValueCost
  // per JSON value that is created, copied or scanned. The default takes about a second.
  uint64_t max_work = uint64_t{1} << 28;
  size_t max_bytes = size_t{16} << 20;  // the output, and any one string built
  std::chrono::milliseconds max_time{2000};
};

struct RenderOptions {
  std::vector<std::string> data_vars;  // context variables whose strings are data
  // Strings that are template text even when read from data: values the caller has
  // validated and that hold no special token (roles: "<|" + message.role + "|>" must
  // still make a control token).
  std::vector<std::string> trusted_strings;
  RenderLimits limits;
  // strftime_now's time in seconds since the epoch, printed as UTC, for reproducible
  // renderings; unset: the current local time.
  std::optional<int64_t> fixed_time;
};

class JinjaTemplate {
 public:
  static Result<JinjaTemplate> parse(std::string_view source);
  // `context`: a JSON object of top-level variables (messages, add_generation_prompt,
  // bos_token, eos_token, ...).
  Result<PromptText> render(const nlohmann::ordered_json& context,
                            const RenderOptions& options = {}) const;

  struct Node;  // statement tree, defined in jinja_internal.h

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace hypura::tokenizer
