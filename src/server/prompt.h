// From a parsed request to what the Session consumes: prompt tokens and GenerateOptions.
//
// Chat requests are rendered with the model's own chat template (Engine::tokenize_chat).
// /api/generate renders {system, prompt} the same way, or, with "raw", tokenizes the
// prompt as is, or, with "template", renders the request's template: a subset of
// Ollama's Go templates ({{ .System }}, {{ .Prompt }}, {{ .Response }},
// {{ if .X }}..{{ else }}..{{ end }}, and the {{- -}} whitespace trims).
// /v1/completions is a raw completion. A request with a suffix is fill-in-the-middle:
// <fim_prefix>prompt<fim_suffix>suffix<fim_middle> with the model's FIM tokens.
// A chat that ends with an assistant message continues that message.
//
// Context: a request may use request_context() tokens. A chat that does not fit with
// room for its reply (reply_room()) loses its oldest turns on /api/chat, as Ollama does:
// every system message is kept, and the conversation restarts at a user message. On
// /v1/* (OpenAI) and for other prompts, a prompt that does not fit is a 400
// (context_length_exceeded).
//
// Thread-safety: pure functions over a const Engine (which is shared read-only).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runtime/session.h"
#include "server/api_request.h"

namespace hypura::server {

struct TemplateVars {
  std::string system;
  std::string prompt;
  std::string response;
};

// Renders the Go-template subset above. kInvalidArgument names the unsupported action.
Result<std::string> render_prompt_template(std::string_view tmpl, const TemplateVars& vars);

// The context window this request may use, in tokens: options.num_ctx capped by the
// model's trained length (Engine::max_context()), or the server's --context.
int64_t request_context(const GenerationRequest& request, const runtime::Engine& engine);

// Tokens kept free for the reply when old turns are dropped: num_predict (at most half
// the window) or, when unbounded, a quarter of the window (at most 1024); at least 1.
int64_t reply_room(const GenerationRequest& request, int64_t n_ctx);

// What the Session gets for a request.
struct PreparedPrompt {
  std::vector<int32_t> tokens;  // with BOS where the model wants one
  int64_t n_ctx = 0;            // request_context()
  size_t dropped_messages = 0;  // oldest chat messages left out to fit n_ctx
};

// Errors are HTTP 400s; *too_long is set when the error is a prompt that does not fit
// (OpenAI's code context_length_exceeded).
Result<PreparedPrompt> prepare_prompt(const runtime::Engine& engine,
                                      const GenerationRequest& request, bool* too_long);

// Whether the prompt is rendered by the model's chat template (chat APIs, and
// /api/generate without raw, template or suffix), so the reply is in the model's format.
bool uses_chat_template(const GenerationRequest& request);

// The prompt's token ids, without fitting them to a context (no turn is dropped).
Result<std::vector<int32_t>> tokenize_request(const runtime::Engine& engine,
                                              const GenerationRequest& request);

// Sampling and limits for the Session. Fails (kInvalidArgument, HTTP 400) when the prompt
// leaves no room to generate within the request's context window n_ctx. max_tokens is
// num_predict capped by the room left; `fresh_seed` is used when the request has none.
Result<runtime::GenerateOptions> generate_options(const GenerationRequest& request,
                                                  int64_t n_prompt, int64_t n_ctx,
                                                  uint64_t fresh_seed);

}  // namespace hypura::server
