#include "server/prompt.h"

#include <algorithm>
#include <cctype>

namespace hypura::server {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string_view ltrim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  return s;
}

const std::string* lookup(std::string_view name, const TemplateVars& vars) {
  if (name == ".System") return &vars.system;
  if (name == ".Prompt") return &vars.prompt;
  if (name == ".Response") return &vars.response;
  return nullptr;
}

// One open {{ if }}: whether its enclosing text is emitted and which branch we are in.
struct Branch {
  bool parent_emits;
  bool condition;
  bool in_else;
  bool emits() const { return parent_emits && (in_else ? !condition : condition); }
};

Status unsupported_action(std::string_view action) {
  return invalid_argument("\"template\": unsupported action {{ " + std::string(action) + " }}");
}

// Applies one action (the text between {{ and }}, trims removed) to the render state.
Status apply_action(std::string_view action, const TemplateVars& vars, std::vector<Branch>* stack,
                    std::string* out) {
  const bool emitting = stack->empty() || stack->back().emits();
  if (action.substr(0, 3) == "if ") {
    const std::string* v = lookup(trim(action.substr(3)), vars);
    if (!v) return unsupported_action(action);
    stack->push_back({emitting, !v->empty(), false});
  } else if (action == "else") {
    if (stack->empty() || stack->back().in_else) return unsupported_action(action);
    stack->back().in_else = true;
  } else if (action == "end") {
    if (stack->empty()) return invalid_argument("\"template\": {{ end }} without {{ if }}");
    stack->pop_back();
  } else if (const std::string* v = lookup(action, vars)) {
    if (emitting) out->append(*v);
  } else {
    return unsupported_action(action);
  }
  return Status::ok();
}

}  // namespace

Result<std::string> render_prompt_template(std::string_view tmpl, const TemplateVars& vars) {
  std::string out;
  std::vector<Branch> stack;
  bool trim_next = false;  // the previous action ended with -}}
  size_t pos = 0;
  while (pos <= tmpl.size()) {
    size_t open = tmpl.find("{{", pos);
    std::string_view text = tmpl.substr(pos, open == std::string_view::npos ? tmpl.npos : open - pos);
    if (trim_next) text = ltrim(text);
    bool trim_before = open != std::string_view::npos && tmpl.substr(open, 3) == "{{-";
    if (trim_before) text = rtrim(text);
    if (stack.empty() || stack.back().emits()) out.append(text);
    if (open == std::string_view::npos) break;
    size_t close = tmpl.find("}}", open + 2);
    if (close == std::string_view::npos) return invalid_argument("\"template\": unclosed {{");
    std::string_view action = tmpl.substr(open + 2, close - open - 2);
    if (trim_before) action.remove_prefix(1);
    trim_next = !action.empty() && action.back() == '-';
    if (trim_next) action.remove_suffix(1);
    HYPURA_RETURN_IF_ERROR(apply_action(trim(action), vars, &stack, &out));
    pos = close + 2;
  }
  if (!stack.empty()) return invalid_argument("\"template\": {{ if }} without {{ end }}");
  return out;
}

Result<std::vector<int32_t>> tokenize_request(const runtime::Engine& engine,
                                              const GenerationRequest& request) {
  std::vector<int32_t> tokens;
  switch (request.api) {
    case Api::kOllamaChat:
    case Api::kOpenAiChat: {
      HYPURA_ASSIGN_OR_RETURN(tokens, engine.tokenize_chat(request.messages, true));
      break;
    }
    case Api::kOpenAiCompletion:
      tokens = engine.tokenize(request.prompt, true);
      break;
    case Api::kOllamaGenerate:
      if (request.raw) {
        tokens = engine.tokenize(request.prompt, true);
      } else if (!request.prompt_template.empty()) {
        TemplateVars vars{request.system, request.prompt, ""};
        HYPURA_ASSIGN_OR_RETURN(std::string text, render_prompt_template(request.prompt_template, vars));
        tokens = engine.tokenize(text, true);
      } else {
        std::vector<runtime::ChatMessage> messages;
        if (!request.system.empty()) messages.push_back({"system", request.system});
        messages.push_back({"user", request.prompt});
        HYPURA_ASSIGN_OR_RETURN(tokens, engine.tokenize_chat(messages, true));
      }
      break;
  }
  if (tokens.empty()) return invalid_argument("the prompt is empty");
  return tokens;
}

int64_t request_context(const GenerationRequest& request, int64_t server_ctx) {
  return request.num_ctx > 0 ? std::min(request.num_ctx, server_ctx) : server_ctx;
}

Result<runtime::GenerateOptions> generate_options(const GenerationRequest& request,
                                                  int64_t n_prompt, int64_t server_ctx,
                                                  uint64_t fresh_seed) {
  const int64_t n_ctx = request_context(request, server_ctx);
  if (n_prompt >= n_ctx) {
    return invalid_argument("the prompt is " + std::to_string(n_prompt) +
                            " tokens but the context window holds " + std::to_string(n_ctx) +
                            " (see --context and options.num_ctx)");
  }
  const int64_t room = n_ctx - n_prompt;
  runtime::GenerateOptions options;
  options.sampling = request.sampling;
  if (!request.seed_given) options.sampling.seed = fresh_seed;
  if (options.sampling.repeat_last_n < 0) options.sampling.repeat_last_n = static_cast<int>(n_ctx);
  options.max_tokens = static_cast<int>(request.num_predict < 0 ? room
                                                                : std::min<int64_t>(request.num_predict, room));
  options.stop = request.stop;
  return options;
}

}  // namespace hypura::server
