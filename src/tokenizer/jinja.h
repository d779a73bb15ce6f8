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
// range, strftime_now. Macros, includes, call blocks and custom filters are not
// supported: such templates fail to parse and the caller falls back.
//
// Values are JSON (nlohmann::ordered_json); `messages` and other context values are
// passed as JSON. Rendering errors (a template's raise_exception, an unsupported
// construct, a type error) come back as a Status.
//
// Thread-safety: a parsed JinjaTemplate is immutable; render() may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace hypura::tokenizer {

class JinjaTemplate {
 public:
  static Result<JinjaTemplate> parse(std::string_view source);
  // `context`: a JSON object of top-level variables (messages, add_generation_prompt,
  // bos_token, eos_token, ...).
  Result<std::string> render(const nlohmann::ordered_json& context) const;

  struct Node;  // statement tree, defined in jinja_internal.h

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace hypura::tokenizer
