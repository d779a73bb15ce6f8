// From a parsed request to what the Session consumes: prompt tokens and GenerateOptions.
//
// Chat requests are rendered with the model's own chat template (Engine::tokenize_chat).
// /api/generate renders {system, prompt} the same way, or, with "raw", tokenizes the
// prompt as is, or, with "template", renders the request's template: a subset of
// Ollama's Go templates ({{ .System }}, {{ .Prompt }}, {{ .Response }},
// {{ if .X }}..{{ else }}..{{ end }}, and the {{- -}} whitespace trims).
// /v1/completions is a raw completion.
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

// The prompt's token ids for the Session (with BOS where the model wants one).
Result<std::vector<int32_t>> tokenize_request(const runtime::Engine& engine,
                                              const GenerationRequest& request);

// The context window this request may use: min(options.num_ctx, the server's), tokens.
int64_t request_context(const GenerationRequest& request, int64_t server_ctx);

// Sampling and limits for the Session. Fails (kInvalidArgument, HTTP 400) when the
// prompt leaves no room to generate within the request's context window. max_tokens is
// num_predict capped by the room left; `fresh_seed` is used when the request has none.
Result<runtime::GenerateOptions> generate_options(const GenerationRequest& request,
                                                  int64_t n_prompt, int64_t server_ctx,
                                                  uint64_t fresh_seed);

}  // namespace hypura::server
