#include "server/api_request.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace hypura::server {
namespace {

using json = nlohmann::json;

Status type_error(std::string_view path, std::string_view expected) {
  return invalid_argument("\"" + std::string(path) + "\": expected " + std::string(expected));
}

Status range_error(std::string_view path, std::string_view range) {
  return invalid_argument("\"" + std::string(path) + "\": must be " + std::string(range));
}

// The value at `key`, or nullptr when absent or JSON null (null means "not given").
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string join(std::string_view prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : std::string(prefix) + "." + std::string(key);
}

// Typed optional getters: leave *out unchanged when the key is absent or null.
Status get_string(const json& obj, const char* key, std::string_view prefix, std::string* out) {
  const json* v = field(obj, key);
  if (!v) return Status::ok();
  if (!v->is_string()) return type_error(join(prefix, key), "a string");
  *out = v->get_ref<const std::string&>();
  return Status::ok();
}

Status get_bool(const json& obj, const char* key, std::string_view prefix, bool* out) {
  const json* v = field(obj, key);
  if (!v) return Status::ok();
  if (!v->is_boolean()) return type_error(join(prefix, key), "a boolean");
  *out = v->get<bool>();
  return Status::ok();
}

// Integers may arrive as JSON floats with an integral value (JavaScript clients do that).
Status get_int(const json& obj, const char* key, std::string_view prefix, int64_t lo, int64_t hi,
               int64_t* out, bool* given = nullptr) {
  const json* v = field(obj, key);
  if (!v) return Status::ok();
  const std::string path = join(prefix, key);
  int64_t value = 0;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return range_error(path, "at most " + std::to_string(hi));
    value = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    value = v->get<int64_t>();
  } else if (v->is_number_float()) {
    double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) {
      return type_error(path, "an integer");
    }
    value = static_cast<int64_t>(d);
  } else {
    return type_error(path, "an integer");
  }
  if (value < lo || value > hi) {
    return range_error(path, "between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  *out = value;
  if (given) *given = true;
  return Status::ok();
}

Status get_float(const json& obj, const char* key, std::string_view prefix, double lo, double hi,
                 float* out) {
  const json* v = field(obj, key);
  if (!v) return Status::ok();
  const std::string path = join(prefix, key);
  if (!v->is_number()) return type_error(path, "a number");
  double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return range_error(path, "between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  *out = static_cast<float>(d);
  return Status::ok();
}

// "stop": a string or an array of strings.
Status get_stop(const json& obj, std::string_view prefix, const RequestLimits& limits,
                std::vector<std::string>* out) {
  const json* v = field(obj, "stop");
  if (!v) return Status::ok();
  const std::string path = join(prefix, "stop");
  std::vector<std::string> stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& s : *v) {
      if (!s.is_string()) return type_error(path, "an array of strings");
      stop.push_back(s.get<std::string>());
    }
  } else {
    return type_error(path, "a string or an array of strings");
  }
  if (stop.size() > limits.max_stop_strings) {
    return range_error(path, "at most " + std::to_string(limits.max_stop_strings) + " strings");
  }
  for (const std::string& s : stop) {
    if (s.size() > limits.max_stop_length) {
      return range_error(path,
                         "strings of at most " + std::to_string(limits.max_stop_length) + " bytes");
    }
  }
  out->clear();
  for (std::string& s : stop) {
    if (!s.empty()) out->push_back(std::move(s));
  }
  return Status::ok();
}

// A seed: any integer; a negative one (Ollama's -1) asks for a random seed.
Status get_seed(const json& obj, std::string_view prefix, GenerationRequest* req) {
  int64_t seed = -1;
  bool given = false;
  HYPURA_RETURN_IF_ERROR(get_int(obj, "seed", prefix, std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max(), &seed, &given));
  if (given && seed >= 0) {
    req->sampling.seed = static_cast<uint64_t>(seed);
    req->seed_given = true;
  }
  return Status::ok();
}

Status parse_model(const json& body, GenerationRequest* req) {
  HYPURA_RETURN_IF_ERROR(get_string(body, "model", "", &req->model));
  if (req->model.empty()) return invalid_argument("model is required");
  return Status::ok();
}

// Images need a vision model; answer clearly instead of silently dropping them.
Status reject_images(const json& obj, std::string_view path) {
  const json* v = field(obj, "images");
  if (!v) return Status::ok();
  if (!v->is_array()) return type_error(path, "an array");
  if (!v->empty()) {
    return invalid_argument("\"" + std::string(path) +
                            "\": images are not supported (text-only models)");
  }
  return Status::ok();
}

// "tools": [{"type": "function", "function": {"name", "description", "parameters"}}].
Status parse_tools(const json& body, GenerationRequest* req) {
  const json* v = field(body, "tools");
  if (!v) return Status::ok();
  if (!v->is_array()) return type_error("tools", "an array");
  for (size_t i = 0; i < v->size(); ++i) {
    const json& t = (*v)[i];
    const std::string path = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return type_error(path, "an object");
    std::string type = "function";
    HYPURA_RETURN_IF_ERROR(get_string(t, "type", path, &type));
    if (type != "function") return invalid_argument("\"" + path + ".type\": must be \"function\"");
    const json* fn = field(t, "function");
    if (!fn || !fn->is_object()) return type_error(path + ".function", "an object");
    std::string name;
    HYPURA_RETURN_IF_ERROR(get_string(*fn, "name", path + ".function", &name));
    if (name.empty()) return invalid_argument("\"" + path + ".function.name\": required");
  }
  if (!v->empty()) req->tools = v->dump(-1, ' ', false, json::error_handler_t::replace);
  return Status::ok();
}

// An assistant message's "tool_calls": [{"function": {"name", "arguments"}}], arguments
// an object (Ollama) or a JSON string holding one (OpenAI); kept as [{"name", "arguments"}].
Status parse_tool_calls(const json& m, const std::string& path, runtime::ChatMessage* msg) {
  const json* v = field(m, "tool_calls");
  if (!v) return Status::ok();
  if (!v->is_array()) return type_error(path + ".tool_calls", "an array");
  json calls = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string call_path = path + ".tool_calls[" + std::to_string(i) + "]";
    const json& c = (*v)[i];
    const json* fn = c.is_object() ? field(c, "function") : nullptr;
    if (!fn || !fn->is_object()) return type_error(call_path + ".function", "an object");
    std::string name;
    HYPURA_RETURN_IF_ERROR(get_string(*fn, "name", call_path + ".function", &name));
    json args = json::object();
    if (const json* a = field(*fn, "arguments")) {
      args = *a;
      if (a->is_string()) {
        json parsed = json::parse(a->get_ref<const std::string&>(), nullptr, false);
        if (!parsed.is_discarded()) args = std::move(parsed);
      }
    }
    calls.push_back({{"name", name}, {"arguments", std::move(args)}});
  }
  if (!calls.empty()) msg->tool_calls = calls.dump(-1, ' ', false, json::error_handler_t::replace);
  return Status::ok();
}

// A JSON schema from a request, compiled; errors name the field it came in.
Status compile_schema(const json& schema, std::string_view field_name, GenerationRequest* req) {
  Result<std::shared_ptr<const grammar::Grammar>> g = grammar::compile_json_schema(schema);
  if (!g.is_ok())
    return invalid_argument("\"" + std::string(field_name) + "\": " + g.status().message());
  req->format = "schema";
  req->grammar = *g;
  return Status::ok();
}

// Ollama "format": "" | "json" | a JSON schema object.
Status parse_ollama_format(const json& body, GenerationRequest* req) {
  const json* v = field(body, "format");
  if (!v) return Status::ok();
  if (v->is_object()) return compile_schema(*v, "format", req);
  if (v->is_string()) {
    const auto& s = v->get_ref<const std::string&>();
    if (!s.empty() && s != "json")
      return invalid_argument("\"format\": must be \"json\" or a schema");
    req->format = s;
    if (s == "json") req->grammar = grammar::any_json_object_grammar();
  } else {
    return type_error("format", "\"json\" or a JSON schema object");
  }
  return Status::ok();
}

Status parse_keep_alive(const json& body, bool* unload) {
  const json* v = field(body, "keep_alive");
  if (!v) return Status::ok();
  if (!v->is_string() && !v->is_number()) {
    return type_error("keep_alive", "a duration string or a number of seconds");
  }
  *unload = keep_alive_is_zero(*v);
  return Status::ok();
}

Status parse_ollama_options(const json& body, const RequestLimits& limits, GenerationRequest* req) {
  const json* opts = field(body, "options");
  if (!opts) return Status::ok();
  if (!opts->is_object()) return type_error("options", "an object");
  const char* p = "options";
  runtime::SamplingParams& s = req->sampling;
  HYPURA_RETURN_IF_ERROR(get_float(*opts, "temperature", p, 0.0, 100.0, &s.temperature));
  int64_t top_k = s.top_k;
  HYPURA_RETURN_IF_ERROR(get_int(*opts, "top_k", p, -1, 1 << 24, &top_k));
  s.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  HYPURA_RETURN_IF_ERROR(get_float(*opts, "top_p", p, 0.0, 1.0, &s.top_p));
  HYPURA_RETURN_IF_ERROR(get_float(*opts, "min_p", p, 0.0, 1.0, &s.min_p));
  HYPURA_RETURN_IF_ERROR(get_float(*opts, "repeat_penalty", p, 0.0, 100.0, &s.repeat_penalty));
  if (s.repeat_penalty == 0.0f) s.repeat_penalty = 1.0f;  // 0: off, like 1
  int64_t last_n = s.repeat_last_n;
  HYPURA_RETURN_IF_ERROR(get_int(*opts, "repeat_last_n", p, -1, 1 << 24, &last_n));
  s.repeat_last_n = static_cast<int>(last_n);  // -1: the whole context (resolved later)
  HYPURA_RETURN_IF_ERROR(get_seed(*opts, p, req));
  int64_t num_predict = req->num_predict;
  HYPURA_RETURN_IF_ERROR(get_int(*opts, "num_predict", p, -2, 1 << 24, &num_predict));
  req->num_predict = num_predict < 0 ? -1 : static_cast<int>(num_predict);  // -2: fill context
  HYPURA_RETURN_IF_ERROR(get_int(*opts, "num_ctx", p, 0, 1 << 24, &req->num_ctx));
  return get_stop(*opts, p, limits, &req->stop);
}

Status check_reasoning_effort(std::string_view field_name, const std::string& effort) {
  if (effort.empty() || effort == "low" || effort == "medium" || effort == "high")
    return Status::ok();
  return invalid_argument("\"" + std::string(field_name) +
                          "\": must be \"low\", \"medium\" or \"high\"");
}

// Ollama's "think": true or false (whether the reply's reasoning is returned), or a
// reasoning effort ("low", "medium", "high"; gpt-oss), which returns it.
Status parse_think(const json& body, GenerationRequest* req) {
  const json* think = field(body, "think");
  if (think == nullptr || think->is_null()) return Status::ok();
  if (think->is_boolean()) {
    req->show_thinking = think->get<bool>();
    return Status::ok();
  }
  if (!think->is_string()) return type_error("think", "a boolean or a string");
  req->reasoning_effort = think->get<std::string>();
  return check_reasoning_effort("think", req->reasoning_effort);
}

Status parse_ollama_common(const json& body, const RequestLimits& limits, GenerationRequest* req) {
  HYPURA_RETURN_IF_ERROR(parse_model(body, req));
  HYPURA_RETURN_IF_ERROR(parse_think(body, req));
  HYPURA_RETURN_IF_ERROR(get_bool(body, "stream", "", &req->stream));
  HYPURA_RETURN_IF_ERROR(parse_ollama_format(body, req));
  HYPURA_RETURN_IF_ERROR(parse_keep_alive(body, &req->unload));
  return parse_ollama_options(body, limits, req);
}

Status parse_ollama_generate(const json& body, const RequestLimits& limits,
                             GenerationRequest* req) {
  HYPURA_RETURN_IF_ERROR(parse_ollama_common(body, limits, req));
  HYPURA_RETURN_IF_ERROR(get_string(body, "prompt", "", &req->prompt));
  HYPURA_RETURN_IF_ERROR(get_string(body, "system", "", &req->system));
  HYPURA_RETURN_IF_ERROR(get_string(body, "template", "", &req->prompt_template));
  HYPURA_RETURN_IF_ERROR(get_bool(body, "raw", "", &req->raw));
  HYPURA_RETURN_IF_ERROR(get_string(body, "suffix", "", &req->suffix));
  const json* context = field(body, "context");
  if (context && !context->is_array()) return type_error("context", "an array of integers");
  return reject_images(body, "images");
}

bool known_role(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool";
}

Status parse_ollama_message(const json& m, size_t i, GenerationRequest* req) {
  const std::string path = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) return type_error(path, "an object");
  runtime::ChatMessage msg;
  HYPURA_RETURN_IF_ERROR(get_string(m, "role", path, &msg.role));
  if (!known_role(msg.role)) {
    return invalid_argument("\"" + path + ".role\": unknown role \"" + msg.role +
                            "\" (expected system, user, assistant or tool)");
  }
  HYPURA_RETURN_IF_ERROR(get_string(m, "content", path, &msg.content));
  HYPURA_RETURN_IF_ERROR(reject_images(m, path + ".images"));
  HYPURA_RETURN_IF_ERROR(parse_tool_calls(m, path, &msg));
  HYPURA_RETURN_IF_ERROR(get_string(m, "tool_name", path, &msg.tool_name));
  req->messages.push_back(std::move(msg));
  return Status::ok();
}

Status parse_ollama_chat(const json& body, const RequestLimits& limits, GenerationRequest* req) {
  HYPURA_RETURN_IF_ERROR(parse_ollama_common(body, limits, req));
  HYPURA_RETURN_IF_ERROR(parse_tools(body, req));
  const json* messages = field(body, "messages");
  if (!messages) return Status::ok();  // no messages: a "load the model" request
  if (!messages->is_array()) return type_error("messages", "an array");
  if (messages->size() > limits.max_messages) {
    return range_error("messages", "at most " + std::to_string(limits.max_messages) + " entries");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    HYPURA_RETURN_IF_ERROR(parse_ollama_message((*messages)[i], i, req));
  }
  return Status::ok();
}

// OpenAI message content: a string, or an array of parts of which only "text" is served.
Status parse_openai_content(const json& m, const std::string& path, std::string* out) {
  const json* content = field(m, "content");
  if (!content) return Status::ok();
  if (content->is_string()) {
    *out = content->get<std::string>();
    return Status::ok();
  }
  if (!content->is_array()) return type_error(path + ".content", "a string or an array of parts");
  for (size_t j = 0; j < content->size(); ++j) {
    const json& part = (*content)[j];
    const std::string part_path = path + ".content[" + std::to_string(j) + "]";
    if (!part.is_object()) return type_error(part_path, "an object");
    std::string type;
    HYPURA_RETURN_IF_ERROR(get_string(part, "type", part_path, &type));
    if (type != "text") {
      return invalid_argument("\"" + part_path + ".type\": \"" + type +
                              "\" is not supported (text-only models)");
    }
    std::string text;
    HYPURA_RETURN_IF_ERROR(get_string(part, "text", part_path, &text));
    out->append(text);
  }
  return Status::ok();
}

Status parse_openai_message(const json& m, size_t i, GenerationRequest* req) {
  const std::string path = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) return type_error(path, "an object");
  runtime::ChatMessage msg;
  HYPURA_RETURN_IF_ERROR(get_string(m, "role", path, &msg.role));
  if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for system
  if (!known_role(msg.role)) {
    return invalid_argument("\"" + path + ".role\": unknown role \"" + msg.role +
                            "\" (expected system, developer, user, assistant or tool)");
  }
  HYPURA_RETURN_IF_ERROR(parse_openai_content(m, path, &msg.content));
  HYPURA_RETURN_IF_ERROR(parse_tool_calls(m, path, &msg));
  HYPURA_RETURN_IF_ERROR(get_string(m, "name", path, &msg.tool_name));
  if (msg.role != "tool") msg.tool_name.clear();  // a user's "name" is not a tool's
  req->messages.push_back(std::move(msg));
  return Status::ok();
}

Status parse_openai_sampling(const json& body, const RequestLimits& limits,
                             GenerationRequest* req) {
  // OpenAI's defaults: temperature 1, top_p 1, no repetition penalty.
  runtime::SamplingParams& s = req->sampling;
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  s.repeat_penalty = 1.0f;
  HYPURA_RETURN_IF_ERROR(get_float(body, "temperature", "", 0.0, 2.0, &s.temperature));
  HYPURA_RETURN_IF_ERROR(get_float(body, "top_p", "", 0.0, 1.0, &s.top_p));
  // Extensions many OpenAI-style servers accept.
  int64_t top_k = s.top_k;
  HYPURA_RETURN_IF_ERROR(get_int(body, "top_k", "", -1, 1 << 24, &top_k));
  s.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  HYPURA_RETURN_IF_ERROR(get_float(body, "min_p", "", 0.0, 1.0, &s.min_p));
  HYPURA_RETURN_IF_ERROR(get_float(body, "repeat_penalty", "", 0.0, 100.0, &s.repeat_penalty));
  if (s.repeat_penalty == 0.0f) s.repeat_penalty = 1.0f;
  float ignored = 0;
  HYPURA_RETURN_IF_ERROR(get_float(body, "frequency_penalty", "", -2.0, 2.0, &ignored));
  HYPURA_RETURN_IF_ERROR(get_float(body, "presence_penalty", "", -2.0, 2.0, &ignored));
  HYPURA_RETURN_IF_ERROR(get_seed(body, "", req));
  return get_stop(body, "", limits, &req->stop);
}

Status parse_openai_common(const json& body, const RequestLimits& limits, GenerationRequest* req) {
  req->stream = false;
  HYPURA_RETURN_IF_ERROR(parse_model(body, req));
  HYPURA_RETURN_IF_ERROR(get_bool(body, "stream", "", &req->stream));
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return type_error("stream_options", "an object");
    HYPURA_RETURN_IF_ERROR(get_bool(*so, "include_usage", "stream_options", &req->include_usage));
  }
  int64_t n = 1;
  HYPURA_RETURN_IF_ERROR(get_int(body, "n", "", 1, 1, &n));
  bool logprobs = false;
  if (const json* lp = field(body, "logprobs"); lp && lp->is_boolean()) logprobs = lp->get<bool>();
  if (logprobs) return invalid_argument("\"logprobs\": not supported");
  int64_t max_tokens = req->num_predict;
  HYPURA_RETURN_IF_ERROR(get_int(body, "max_tokens", "", 0, 1 << 24, &max_tokens));
  HYPURA_RETURN_IF_ERROR(get_int(body, "max_completion_tokens", "", 0, 1 << 24, &max_tokens));
  req->num_predict = static_cast<int>(max_tokens);
  return parse_openai_sampling(body, limits, req);
}

// OpenAI "response_format": {"type": "text" | "json_object"} or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict", "description"}} (a missing schema: any object).
Status parse_openai_response_format(const json& body, GenerationRequest* req) {
  const json* rf = field(body, "response_format");
  if (!rf) return Status::ok();
  if (!rf->is_object()) return type_error("response_format", "an object");
  std::string type;
  HYPURA_RETURN_IF_ERROR(get_string(*rf, "type", "response_format", &type));
  if (type == "json_object") {
    req->format = "json";
    req->grammar = grammar::any_json_object_grammar();
  } else if (type == "json_schema") {
    const json* js = field(*rf, "json_schema");
    if (!js || !js->is_object()) return type_error("response_format.json_schema", "an object");
    if (const json* schema = field(*js, "schema")) {
      if (!schema->is_object() && !schema->is_boolean()) {
        return type_error("response_format.json_schema.schema", "a JSON schema object");
      }
      return compile_schema(*schema, "response_format.json_schema.schema", req);
    }
    req->format = "json";
    req->grammar = grammar::any_json_object_grammar();
  } else if (!type.empty() && type != "text") {
    return invalid_argument("\"response_format.type\": unknown type \"" + type + "\"");
  }
  return Status::ok();
}

Status parse_openai_chat(const json& body, const RequestLimits& limits, GenerationRequest* req) {
  HYPURA_RETURN_IF_ERROR(parse_openai_common(body, limits, req));
  HYPURA_RETURN_IF_ERROR(parse_tools(body, req));
  // tool_choice: "none" withdraws the tools; "auto", "required" or a named function
  // leave the choice to the model (not enforced).
  if (const json* choice = field(body, "tool_choice");
      choice && choice->is_string() && *choice == "none") {
    req->tools.clear();
  }
  HYPURA_RETURN_IF_ERROR(parse_openai_response_format(body, req));
  HYPURA_RETURN_IF_ERROR(get_string(body, "reasoning_effort", "", &req->reasoning_effort));
  HYPURA_RETURN_IF_ERROR(check_reasoning_effort("reasoning_effort", req->reasoning_effort));
  const json* messages = field(body, "messages");
  if (!messages) return invalid_argument("\"messages\": required");
  if (!messages->is_array()) return type_error("messages", "an array");
  if (messages->empty()) return invalid_argument("\"messages\": must not be empty");
  if (messages->size() > limits.max_messages) {
    return range_error("messages", "at most " + std::to_string(limits.max_messages) + " entries");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    HYPURA_RETURN_IF_ERROR(parse_openai_message((*messages)[i], i, req));
  }
  return Status::ok();
}

Status parse_openai_completion(const json& body, const RequestLimits& limits,
                               GenerationRequest* req) {
  req->num_predict = 16;  // OpenAI's default max_tokens for completions
  HYPURA_RETURN_IF_ERROR(parse_openai_common(body, limits, req));
  req->raw = true;
  const json* prompt = field(body, "prompt");
  if (!prompt) return invalid_argument("\"prompt\": required");
  if (prompt->is_string()) {
    req->prompt = prompt->get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    req->prompt = (*prompt)[0].get<std::string>();
  } else {
    return type_error("prompt", "a string (or an array holding one string)");
  }
  bool echo = false;
  HYPURA_RETURN_IF_ERROR(get_bool(body, "echo", "", &echo));
  if (echo) return invalid_argument("\"echo\": not supported");
  HYPURA_RETURN_IF_ERROR(get_string(body, "suffix", "", &req->suffix));
  HYPURA_RETURN_IF_ERROR(parse_openai_response_format(body, req));
  int64_t best_of = 1;
  return get_int(body, "best_of", "", 1, 1, &best_of);
}

// Embedding inputs: a string or an array of strings; on /v1 also token ids ([int] is one
// input, [[int]] several).
Status parse_embed_input(const json& v, bool allow_tokens, const RequestLimits& limits,
                         EmbedRequest* req) {
  const char* expected = allow_tokens ? "a string, an array of strings or of token arrays"
                                      : "a string or an array of strings";
  if (v.is_string()) {
    req->texts.push_back(v.get<std::string>());
    return Status::ok();
  }
  if (!v.is_array()) return type_error("input", expected);
  if (v.size() > limits.max_inputs) {
    return range_error("input", "at most " + std::to_string(limits.max_inputs) + " entries");
  }
  const auto token_ids = [&](const json& a, std::vector<int32_t>* out) {
    for (const json& t : a) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        return false;
      out->push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return true;
  };
  if (allow_tokens && !v.empty() && v[0].is_number()) {
    std::vector<int32_t> ids;
    if (!token_ids(v, &ids)) return type_error("input", expected);
    req->token_inputs.push_back(std::move(ids));
    return Status::ok();
  }
  for (const json& item : v) {
    if (item.is_string()) {
      req->texts.push_back(item.get<std::string>());
    } else if (std::vector<int32_t> ids; allow_tokens && item.is_array() && token_ids(item, &ids)) {
      req->token_inputs.push_back(std::move(ids));
    } else {
      return type_error("input", expected);
    }
  }
  if (!req->texts.empty() && !req->token_inputs.empty()) {
    return invalid_argument("\"input\": mixes strings and token arrays");
  }
  return Status::ok();
}

// /api/embeddings: one "prompt"; an empty one gets an empty embedding (as Ollama).
Status get_string_input(const json& body, EmbedRequest* req) {
  std::string prompt;
  HYPURA_RETURN_IF_ERROR(get_string(body, "prompt", "", &prompt));
  if (!prompt.empty()) req->texts.push_back(std::move(prompt));
  return Status::ok();
}

Status parse_embed_fields(const json& body, const RequestLimits& limits, EmbedRequest* req) {
  HYPURA_RETURN_IF_ERROR(get_string(body, "model", "", &req->model));
  if (req->model.empty()) return invalid_argument("model is required");
  HYPURA_RETURN_IF_ERROR(parse_keep_alive(body, &req->unload));
  if (const json* opts = field(body, "options")) {
    if (!opts->is_object()) return type_error("options", "an object");
    HYPURA_RETURN_IF_ERROR(get_int(*opts, "num_ctx", "options", 0, 1 << 24, &req->num_ctx));
  }
  HYPURA_RETURN_IF_ERROR(get_int(body, "dimensions", "", 0, 1 << 20, &req->dimensions));
  if (req->api == Api::kOllamaEmbeddings) return get_string_input(body, req);
  HYPURA_RETURN_IF_ERROR(get_bool(body, "truncate", "", &req->truncate));
  if (req->api == Api::kOpenAiEmbeddings) {
    std::string encoding = "float";
    HYPURA_RETURN_IF_ERROR(get_string(body, "encoding_format", "", &encoding));
    if (encoding != "float" && encoding != "base64") {
      return invalid_argument("\"encoding_format\": must be \"float\" or \"base64\"");
    }
    req->base64 = encoding == "base64";
  }
  const json* input = field(body, "input");
  if (!input) return invalid_argument("\"input\": required");
  return parse_embed_input(*input, req->api == Api::kOpenAiEmbeddings, limits, req);
}

// The body as a JSON object, or the 400 that says why not.
Result<json> parse_body_object(std::string_view body) {
  if (!json_depth_within(body, kMaxJsonDepth)) {
    return invalid_argument("request body nests deeper than " + std::to_string(kMaxJsonDepth) +
                            " levels");
  }
  json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return invalid_argument("invalid JSON in request body");
  if (!doc.is_object()) return invalid_argument("request body must be a JSON object");
  return doc;
}

}  // namespace

bool json_depth_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is the parser's to reject
    }
  }
  return true;
}

Result<GenerationRequest> parse_generation_request(Api api, std::string_view body,
                                                   const RequestLimits& limits) {
  HYPURA_ASSIGN_OR_RETURN(json doc, parse_body_object(body));
  GenerationRequest req;
  req.api = api;
  Status st;
  switch (api) {
    case Api::kOllamaGenerate:
      st = parse_ollama_generate(doc, limits, &req);
      break;
    case Api::kOllamaChat:
      st = parse_ollama_chat(doc, limits, &req);
      break;
    case Api::kOpenAiChat:
      st = parse_openai_chat(doc, limits, &req);
      break;
    case Api::kOpenAiCompletion:
      st = parse_openai_completion(doc, limits, &req);
      break;
    default:
      st = invalid_argument("not a generation endpoint");
      break;
  }
  if (!st.is_ok()) return st;
  return req;
}

Result<EmbedRequest> parse_embed_request(Api api, std::string_view body,
                                         const RequestLimits& limits) {
  HYPURA_ASSIGN_OR_RETURN(json doc, parse_body_object(body));
  EmbedRequest req;
  req.api = api;
  if (api != Api::kOllamaEmbed && api != Api::kOllamaEmbeddings && api != Api::kOpenAiEmbeddings) {
    return invalid_argument("not an embedding endpoint");
  }
  HYPURA_RETURN_IF_ERROR(parse_embed_fields(doc, limits, &req));
  return req;
}

Result<std::string> parse_show_request(std::string_view body) {
  HYPURA_ASSIGN_OR_RETURN(json doc, parse_body_object(body));
  std::string model;
  HYPURA_RETURN_IF_ERROR(get_string(doc, "name", "", &model));
  HYPURA_RETURN_IF_ERROR(get_string(doc, "model", "", &model));
  if (model.empty()) return invalid_argument("model is required");
  return model;
}

Result<PullRequest> parse_pull_request(std::string_view body) {
  PullRequest req;
  HYPURA_ASSIGN_OR_RETURN(req.model, parse_show_request(body));
  HYPURA_ASSIGN_OR_RETURN(json doc, parse_body_object(body));
  HYPURA_RETURN_IF_ERROR(get_bool(doc, "stream", "", &req.stream));
  return req;
}

bool keep_alive_is_zero(const json& value) {
  if (value.is_number()) return value.get<double>() == 0.0;
  if (!value.is_string()) return false;
  // A Go duration whose every number is zero ("0", "0s", "0m0s", "0.0h").
  const std::string& s = value.get_ref<const std::string&>();
  bool digit = false;
  for (char c : s) {
    if (c >= '1' && c <= '9') return false;
    digit |= c == '0';
    if (c != '0' && c != '.' && c != '+' && !std::isalpha(static_cast<unsigned char>(c)) &&
        c != '\xc2' && c != '\xb5') {  // units: ns us µs ms s m h
      return false;
    }
  }
  return digit;
}

std::string normalize_model_name(std::string_view name) {
  constexpr std::string_view kLatest = ":latest";
  if (name.size() > kLatest.size() && name.substr(name.size() - kLatest.size()) == kLatest) {
    name.remove_suffix(kLatest.size());
  }
  return std::string(name);
}

}  // namespace hypura::server
