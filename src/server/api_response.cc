#include "server/api_response.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace hypura::server {
namespace {

using json = nlohmann::json;

// Ollama's "done_reason": "stop" | "length"; OpenAI's finish_reason uses the same words.
std::string reason(const runtime::GenerateResult& r) {
  return r.done_reason == "length" ? "length" : "stop";
}

json details(const ModelInfo& info) {
  return {{"parent_model", ""},
          {"format", "gguf"},
          {"family", info.family},
          {"families", json::array({info.family})},
          {"parameter_size", info.parameter_size},
          {"quantization_level", info.quantization_level}};
}

}  // namespace

std::string rfc3339(int64_t unix_ns) {
  std::time_t secs = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(unix_ns % 1'000'000'000));
  return buf;
}

std::string now_rfc3339() {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  return rfc3339(ns.count());
}

int64_t now_unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ollama_error(std::string_view message) {
  return dump_json({{"error", std::string(message)}});
}

std::string openai_error(std::string_view message, std::string_view type, std::string_view code) {
  json err = {{"message", std::string(message)},
              {"type", std::string(type)},
              {"param", nullptr},
              {"code", nullptr}};
  if (!code.empty()) err["code"] = std::string(code);
  return dump_json({{"error", err}});
}

std::string error_body(Api api, int http_status, std::string_view message, std::string_view code) {
  if (!is_openai(api)) return ollama_error(message);
  if (!code.empty()) return openai_error(message, "invalid_request_error", code);
  if (http_status == 404) return openai_error(message, "invalid_request_error", "model_not_found");
  if (http_status >= 500) return openai_error(message, "server_error");
  return openai_error(message, "invalid_request_error");
}

ResponseFormatter::ResponseFormatter(Api api, std::string model, bool include_usage, std::string id,
                                     int64_t created)
    : api_(api),
      model_(std::move(model)),
      include_usage_(include_usage),
      id_(std::move(id)),
      created_(created) {}

const char* ResponseFormatter::content_type(bool stream) const {
  if (!stream) return "application/json";
  return is_openai(api_) ? "text/event-stream" : "application/x-ndjson";
}

json ResponseFormatter::ollama_base() const {
  return {{"model", model_}, {"created_at", now_rfc3339()}};
}

json ResponseFormatter::openai_base(bool chunk) const {
  const bool chat = api_ == Api::kOpenAiChat;
  const char* object =
      chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", id_},
          {"object", object},
          {"created", created_},
          {"model", model_},
          {"system_fingerprint", "fp_hypura"}};
}

json ResponseFormatter::ollama_text(std::string_view text, std::string_view thinking) const {
  json j = ollama_base();
  if (api_ == Api::kOllamaChat) {
    j["message"] = {{"role", "assistant"}, {"content", std::string(text)}};
    if (!thinking.empty()) j["message"]["thinking"] = std::string(thinking);
  } else {
    j["response"] = std::string(text);
    if (!thinking.empty()) j["thinking"] = std::string(thinking);
  }
  return j;
}

void ResponseFormatter::add_ollama_stats(const Outcome& o, json* j) const {
  const auto& r = o.result;
  (*j)["done"] = true;
  (*j)["done_reason"] = reason(r);
  (*j)["total_duration"] = o.total_ns;
  (*j)["load_duration"] = o.load_ns;
  (*j)["prompt_eval_count"] = o.n_prompt;
  (*j)["prompt_eval_duration"] = static_cast<int64_t>(r.prompt_seconds * 1e9);
  (*j)["eval_count"] = r.generated_tokens;
  (*j)["eval_duration"] = static_cast<int64_t>(r.generate_seconds * 1e9);
}

json ResponseFormatter::usage(const Outcome& o) const {
  return {{"prompt_tokens", o.n_prompt},
          {"completion_tokens", o.result.generated_tokens},
          {"total_tokens", o.n_prompt + o.result.generated_tokens}};
}

json ResponseFormatter::ollama_calls(const std::vector<ToolCall>& calls) const {
  json out = json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

json ResponseFormatter::openai_calls(const std::vector<ToolCall>& calls, size_t first_index,
                                     bool indexed) const {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {
        {"id", "call_" + id_ + "_" + std::to_string(first_index + i)},
        {"type", "function"},
        {"function", {{"name", calls[i].name}, {"arguments", dump_json(calls[i].arguments)}}}};
    if (indexed) c["index"] = first_index + i;
    out.push_back(std::move(c));
  }
  return out;
}

std::string ResponseFormatter::finish_reason(const Outcome& o, bool made_calls) const {
  return made_calls && api_ == Api::kOpenAiChat ? "tool_calls" : reason(o.result);
}

std::string ResponseFormatter::stream_tool_calls(const std::vector<ToolCall>& calls,
                                                 size_t first_index) const {
  if (calls.empty()) return "";
  if (!is_openai(api_)) {
    json j = ollama_text("");
    j["message"]["tool_calls"] = ollama_calls(calls);
    j["done"] = false;
    return dump_json(j) + "\n";
  }
  json j = openai_base(true);
  j["choices"] = json::array({{{"index", 0},
                               {"delta", {{"tool_calls", openai_calls(calls, first_index, true)}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  if (include_usage_) j["usage"] = nullptr;
  return "data: " + dump_json(j) + "\n\n";
}

std::string ResponseFormatter::stream_start() const {
  if (api_ != Api::kOpenAiChat) return "";
  json j = openai_base(true);
  j["choices"] = json::array({{{"index", 0},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  if (include_usage_) j["usage"] = nullptr;
  return "data: " + dump_json(j) + "\n\n";
}

std::string ResponseFormatter::stream_piece(std::string_view piece) const {
  if (!is_openai(api_)) {
    json j = ollama_text(piece);
    j["done"] = false;
    return dump_json(j) + "\n";
  }
  json j = openai_base(true);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (api_ == Api::kOpenAiChat) {
    choice["delta"] = {{"content", std::string(piece)}};
  } else {
    choice["text"] = std::string(piece);
  }
  j["choices"] = json::array({choice});
  if (include_usage_) j["usage"] = nullptr;
  return "data: " + dump_json(j) + "\n\n";
}

std::string ResponseFormatter::stream_thinking(std::string_view thinking) const {
  if (thinking.empty()) return "";
  if (!is_openai(api_)) {
    json j = ollama_text("", thinking);
    j["done"] = false;
    return dump_json(j) + "\n";
  }
  if (api_ != Api::kOpenAiChat) return "";  // completions have no place for it
  json j = openai_base(true);
  j["choices"] = json::array({{{"index", 0},
                               {"delta", {{"reasoning_content", std::string(thinking)}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  if (include_usage_) j["usage"] = nullptr;
  return "data: " + dump_json(j) + "\n\n";
}

std::string ResponseFormatter::stream_end(const Outcome& o, bool made_calls) const {
  if (!is_openai(api_)) {
    json j = ollama_text("");
    add_ollama_stats(o, &j);
    return dump_json(j) + "\n";
  }
  json j = openai_base(true);
  json choice = {
      {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason(o, made_calls)}};
  if (api_ == Api::kOpenAiChat) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  j["choices"] = json::array({choice});
  if (include_usage_) j["usage"] = nullptr;
  std::string out = "data: " + dump_json(j) + "\n\n";
  if (include_usage_) {
    json u = openai_base(true);
    u["choices"] = json::array();
    u["usage"] = usage(o);
    out += "data: " + dump_json(u) + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

std::string ResponseFormatter::stream_error(std::string_view message) const {
  if (!is_openai(api_)) return ollama_error(message) + "\n";
  return "data: " + openai_error(message, "server_error") + "\n\ndata: [DONE]\n\n";
}

std::string ResponseFormatter::full(const std::string& text, const Outcome& o,
                                    const std::vector<ToolCall>& calls,
                                    const std::string& thinking) const {
  if (!is_openai(api_)) {
    json j = ollama_text(text, thinking);
    if (!calls.empty()) j["message"]["tool_calls"] = ollama_calls(calls);
    add_ollama_stats(o, &j);
    return dump_json(j);
  }
  json j = openai_base(false);
  json choice = {
      {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason(o, !calls.empty())}};
  if (api_ == Api::kOpenAiChat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
    if (!thinking.empty()) choice["message"]["reasoning_content"] = thinking;
    if (!calls.empty()) {
      choice["message"]["tool_calls"] = openai_calls(calls, 0, false);
      if (text.empty()) choice["message"]["content"] = nullptr;  // as OpenAI answers a pure call
    }
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({choice});
  j["usage"] = usage(o);
  return dump_json(j);
}

std::string ResponseFormatter::load_response(std::string_view done_reason) const {
  json j = ollama_text("");
  j["done"] = true;
  j["done_reason"] = std::string(done_reason);
  return dump_json(j);
}

void truncate_dimensions(int64_t dimensions, std::vector<float>* v) {
  if (dimensions <= 0 || dimensions >= static_cast<int64_t>(v->size())) return;
  v->resize(static_cast<size_t>(dimensions));
  double norm = 0;
  for (float x : *v) norm += static_cast<double>(x) * x;
  norm = std::sqrt(norm);
  if (norm > 0) {
    for (float& x : *v) x = static_cast<float>(x / norm);
  }
}

std::string base64_floats(const std::vector<float>& v) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u = 0;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b)
      bytes[i * 4 + b] = static_cast<char>((u >> (8 * b)) & 0xff);  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t chunk = 0;
    for (size_t k = 0; k < n; ++k)
      chunk |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + k])) << (16 - 8 * k);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(chunk >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

std::string embed_body(const EmbedRequest& request, std::vector<std::vector<float>> embeddings,
                       int64_t n_tokens, int64_t total_ns, int64_t load_ns) {
  for (auto& e : embeddings) truncate_dimensions(request.dimensions, &e);
  if (request.api == Api::kOllamaEmbeddings) {
    return dump_json({{"embedding", embeddings.empty() ? std::vector<float>{} : embeddings[0]}});
  }
  if (request.api == Api::kOllamaEmbed) {
    return dump_json({{"model", request.model},
                      {"embeddings", embeddings},
                      {"total_duration", total_ns},
                      {"load_duration", load_ns},
                      {"prompt_eval_count", n_tokens}});
  }
  json data = json::array();
  for (size_t i = 0; i < embeddings.size(); ++i) {
    json item = {{"object", "embedding"}, {"index", i}};
    if (request.base64) {
      item["embedding"] = base64_floats(embeddings[i]);
    } else {
      item["embedding"] = embeddings[i];
    }
    data.push_back(std::move(item));
  }
  return dump_json({{"object", "list"},
                    {"data", data},
                    {"model", request.model},
                    {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}});
}

std::string version_body(std::string_view ollama_version, std::string_view hypura_version) {
  return dump_json(
      {{"version", std::string(ollama_version)}, {"hypura_version", std::string(hypura_version)}});
}

std::string tags_body(const ModelInfo& info, const std::vector<store::StoredModel>& pulled) {
  const std::string modified = info.modified_at.empty() ? rfc3339(0) : info.modified_at;
  json m = {{"name", info.name},       {"model", info.name},    {"modified_at", modified},
            {"size", info.size_bytes}, {"digest", info.digest}, {"details", details(info)}};
  json models = json::array({m});
  for (const store::StoredModel& p : pulled) {
    if (p.name == info.name) continue;
    const std::string& sha = p.files.front().sha256;
    models.push_back({{"name", p.name},
                      {"model", p.name},
                      {"modified_at", rfc3339(p.pulled_at * 1000000000)},
                      {"size", p.bytes()},
                      {"digest", sha},
                      {"details", {{"format", "gguf"}}}});
  }
  return dump_json({{"models", models}});
}

std::string pull_event_line(const store::PullEvent& e) {
  json j = {{"status", e.status}};
  if (!e.file.empty()) {
    if (!e.digest.empty()) j["digest"] = e.digest;
    j["total"] = e.total;
    j["completed"] = e.completed;
  }
  return dump_json(j) + "\n";
}

std::string ps_body(const ModelInfo& info, int64_t context) {
  if (context <= 0) return dump_json({{"models", json::array()}});
  // Loaded until a keep_alive 0 request: expires_at is far in the future, like Ollama's
  // keep_alive -1. size_vram is 0 until a GPU tier holds weights.
  json m = {{"name", info.name},        {"model", info.name},
            {"size", info.size_bytes},  {"digest", info.digest},
            {"details", details(info)}, {"expires_at", "2318-01-01T00:00:00Z"},
            {"size_vram", 0},           {"context_length", context}};
  return dump_json({{"models", json::array({m})}});
}

std::string show_body(const ModelInfo& info, int64_t context) {
  std::string parameters = "num_ctx " + std::to_string(context > 0 ? context : info.context_length);
  json j = {{"license", ""},
            {"modelfile", "# Modelfile generated by hypura\nFROM " + info.name + "\n"},
            {"parameters", parameters},
            {"template", info.chat_template},
            {"details", details(info)},
            {"model_info", info.model_info},
            {"capabilities", info.capabilities},
            {"modified_at", info.modified_at.empty() ? rfc3339(0) : info.modified_at}};
  return dump_json(j);
}

std::string openai_model_body(const ModelInfo& info) {
  return dump_json(
      {{"id", info.name}, {"object", "model"}, {"created", info.created}, {"owned_by", "hypura"}});
}

std::string openai_models_body(const ModelInfo& info) {
  json m = json::parse(openai_model_body(info));
  return dump_json({{"object", "list"}, {"data", json::array({m})}});
}

}  // namespace hypura::server
