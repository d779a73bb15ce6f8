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
    std::string_view text =
        tmpl.substr(pos, open == std::string_view::npos ? tmpl.npos : open - pos);
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

namespace {

// A chat ending with an assistant message continues that message.
runtime::ChatOptions chat_options(const GenerationRequest& request) {
  runtime::ChatOptions options;
  const auto& m = request.messages;
  options.continue_final =
      !m.empty() && m.back().role == "assistant" && m.back().tool_calls.empty();
  options.tools = request.tools;
  options.reasoning_effort = request.reasoning_effort;
  return options;
}

// <fim_prefix>prompt<fim_suffix>suffix<fim_middle>, after BOS where the model adds one.
Result<std::vector<int32_t>> tokenize_fim(const runtime::Engine& engine,
                                          const GenerationRequest& request) {
  const std::optional<runtime::FimTokens> fim = engine.fim_tokens();
  if (!fim) {
    return invalid_argument(
        "\"suffix\": this model has no fill-in-the-middle tokens, so it does "
        "not support insert");
  }
  std::vector<int32_t> tokens = engine.tokenize("", true);
  const auto append = [&](int32_t control, const std::string& text) {
    tokens.push_back(control);
    const std::vector<int32_t> part = engine.tokenize(text, false);
    tokens.insert(tokens.end(), part.begin(), part.end());
  };
  append(fim->prefix, request.prompt);
  append(fim->suffix, request.suffix);
  tokens.push_back(fim->middle);
  return tokens;
}

// The conversation without messages[first_kept..) 's predecessors, keeping every system
// message before first_kept.
std::vector<runtime::ChatMessage> keep_from(const std::vector<runtime::ChatMessage>& messages,
                                            size_t first_kept) {
  std::vector<runtime::ChatMessage> kept;
  for (size_t i = 0; i < first_kept; ++i) {
    if (messages[i].role == "system") kept.push_back(messages[i]);
  }
  kept.insert(kept.end(), messages.begin() + static_cast<std::ptrdiff_t>(first_kept),
              messages.end());
  return kept;
}

// Ollama's truncation: the longest tail of the conversation (starting at a user message,
// or the last message alone) that fits n_ctx - room with every earlier system message.
// Fewer kept messages never take more tokens, so the start is found by bisection.
Result<PreparedPrompt> fit_chat(const runtime::Engine& engine, const GenerationRequest& request,
                                int64_t n_ctx, bool* too_long) {
  const std::vector<runtime::ChatMessage>& m = request.messages;
  const runtime::ChatOptions options = chat_options(request);
  const int64_t room = reply_room(request, n_ctx);
  PreparedPrompt out;
  out.n_ctx = n_ctx;
  HYPURA_ASSIGN_OR_RETURN(out.tokens, engine.tokenize_chat(m, options));
  if (static_cast<int64_t>(out.tokens.size()) + room <= n_ctx) return out;
  std::vector<size_t> starts;  // where a shortened conversation may begin, ascending
  for (size_t i = 1; i < m.size(); ++i) {
    if (m[i].role == "user" || i + 1 == m.size()) starts.push_back(i);
  }
  size_t lo = 0, hi = starts.size();  // the answer is in starts[lo, hi); hi: none fits
  size_t start = 0;
  std::vector<int32_t> best;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    HYPURA_ASSIGN_OR_RETURN(std::vector<int32_t> t,
                            engine.tokenize_chat(keep_from(m, starts[mid]), options));
    if (static_cast<int64_t>(t.size()) + room <= n_ctx) {
      best = std::move(t);
      start = starts[mid];
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  if (best.empty()) {
    // Not even the last message leaves room for a whole reply: keep it if it fits at all.
    start = starts.empty() ? 0 : starts.back();
    if (start == 0) {
      best = out.tokens;
    } else {
      HYPURA_ASSIGN_OR_RETURN(best, engine.tokenize_chat(keep_from(m, start), options));
    }
  }
  if (static_cast<int64_t>(best.size()) >= n_ctx) {
    *too_long = true;
    return invalid_argument("the last message is " + std::to_string(best.size()) +
                            " tokens with the system messages, but the context window holds " +
                            std::to_string(n_ctx) + " (see --context and options.num_ctx)");
  }
  for (size_t i = 0; i < start; ++i) out.dropped_messages += m[i].role != "system";
  out.tokens = std::move(best);
  return out;
}

}  // namespace

bool uses_chat_template(const GenerationRequest& request) {
  switch (request.api) {
    case Api::kOllamaChat:
    case Api::kOpenAiChat:
      return true;
    case Api::kOllamaGenerate:
      return request.suffix.empty() && !request.raw && request.prompt_template.empty();
    default:
      return false;
  }
}

Result<std::vector<int32_t>> tokenize_request(const runtime::Engine& engine,
                                              const GenerationRequest& request) {
  std::vector<int32_t> tokens;
  switch (request.api) {
    case Api::kOllamaChat:
    case Api::kOpenAiChat: {
      HYPURA_ASSIGN_OR_RETURN(tokens,
                              engine.tokenize_chat(request.messages, chat_options(request)));
      break;
    }
    case Api::kOpenAiCompletion:
    case Api::kOllamaGenerate:
      if (!request.suffix.empty()) {
        HYPURA_ASSIGN_OR_RETURN(tokens, tokenize_fim(engine, request));
      } else if (request.raw) {  // /v1/completions is always raw
        tokens = engine.tokenize(request.prompt, true);
      } else if (!request.prompt_template.empty()) {
        TemplateVars vars{request.system, request.prompt, ""};
        HYPURA_ASSIGN_OR_RETURN(std::string text,
                                render_prompt_template(request.prompt_template, vars));
        tokens = engine.tokenize(text, true);
      } else {
        std::vector<runtime::ChatMessage> messages;
        if (!request.system.empty()) messages.push_back({"system", request.system});
        messages.push_back({"user", request.prompt});
        HYPURA_ASSIGN_OR_RETURN(tokens, engine.tokenize_chat(messages, {}));
      }
      break;
    case Api::kOllamaEmbed:
    case Api::kOllamaEmbeddings:
    case Api::kOpenAiEmbeddings:
      return invalid_argument("not a generation endpoint");
  }
  if (tokens.empty()) return invalid_argument("the prompt is empty");
  return tokens;
}

int64_t request_context(const GenerationRequest& request, const runtime::Engine& engine) {
  return request.num_ctx > 0 ? std::min(request.num_ctx, engine.max_context()) : engine.n_ctx();
}

int64_t reply_room(const GenerationRequest& request, int64_t n_ctx) {
  const int64_t room = request.num_predict >= 0 ? std::min<int64_t>(request.num_predict, n_ctx / 2)
                                                : std::min<int64_t>(n_ctx / 4, 1024);
  return std::max<int64_t>(room, 1);
}

Result<PreparedPrompt> prepare_prompt(const runtime::Engine& engine,
                                      const GenerationRequest& request, bool* too_long) {
  *too_long = false;
  const int64_t n_ctx = request_context(request, engine);
  if (request.api == Api::kOllamaChat && !request.messages.empty()) {
    return fit_chat(engine, request, n_ctx, too_long);
  }
  PreparedPrompt out;
  out.n_ctx = n_ctx;
  HYPURA_ASSIGN_OR_RETURN(out.tokens, tokenize_request(engine, request));
  if (static_cast<int64_t>(out.tokens.size()) >= n_ctx) {
    *too_long = true;
    return invalid_argument("the prompt is " + std::to_string(out.tokens.size()) +
                            " tokens but the context window holds " + std::to_string(n_ctx) +
                            " (see --context and options.num_ctx)");
  }
  return out;
}

Result<runtime::GenerateOptions> generate_options(const GenerationRequest& request,
                                                  int64_t n_prompt, int64_t n_ctx,
                                                  uint64_t fresh_seed) {
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
  options.max_tokens = static_cast<int>(
      request.num_predict < 0 ? room : std::min<int64_t>(request.num_predict, room));
  options.stop = request.stop;
  options.grammar = request.grammar;  // format / response_format
  options.drop_unfinished_char =
      true;  // a cut stream never ends in U+FFFD (docs/SERVER.md "UTF-8")
  return options;
}

}  // namespace hypura::server
