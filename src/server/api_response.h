// Response bodies, in Ollama's and OpenAI's shapes.
//
// Pure functions from values to JSON text; the HTTP layer only moves bytes. Text from the
// model is valid UTF-8 by the Session's contract; anything else is replaced (U+FFFD)
// rather than allowed to break a response.
//
// Ollama streaming is NDJSON: one object per line per token, then a final object with
// done: true, done_reason ("stop" | "length") and the durations in nanoseconds:
//   total_duration        request received -> last token
//   load_duration         request received -> generation started (queue wait, templating;
//                         the model is loaded once at start, so this is the wait)
//   prompt_eval_count     the whole prompt's tokens (as Ollama counts them)
//   prompt_eval_duration  time processing the part of the prompt not in the KV cache
//   eval_count / eval_duration                generated tokens
// OpenAI streaming is SSE: "data: {chunk}\n\n" events, then "data: [DONE]\n\n"; with
// stream_options.include_usage a last chunk with empty choices carries "usage".
//
// Thread-safety: a ResponseFormatter is used by one HTTP thread; the rest is stateless.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "runtime/session.h"
#include "server/api_request.h"
#include "server/model_info.h"
#include "server/reply_parser.h"
#include "store/model_store.h"

namespace hypura::server {

// RFC 3339 UTC time with nanoseconds ("2026-11-29T17:45:36.123456789Z").
std::string rfc3339(int64_t unix_ns);
std::string now_rfc3339();
int64_t now_unix_seconds();

// Serializes without ever throwing (invalid UTF-8 becomes U+FFFD).
std::string dump_json(const nlohmann::json& j);

// Error bodies: Ollama {"error": "..."}; OpenAI {"error": {"message", "type", "param", "code"}}.
std::string ollama_error(std::string_view message);
std::string openai_error(std::string_view message, std::string_view type,
                         std::string_view code = {});
// The body for an error status in the dialect of `api`, e.g. 404 -> model_not_found;
// `code` (OpenAI's error code, e.g. context_length_exceeded) overrides the default one.
std::string error_body(Api api, int http_status, std::string_view message,
                       std::string_view code = {});

// How a generation went, for the final chunk / usage block.
struct Outcome {
  runtime::GenerateResult result;
  int64_t n_prompt = 0;  // prompt tokens, including those reused from the KV cache
  int64_t total_ns = 0;
  int64_t load_ns = 0;
};

// Builds the bodies of one generation response.
class ResponseFormatter {
 public:
  // `id` is the OpenAI response id ("chatcmpl-7"), `created` its unix time.
  ResponseFormatter(Api api, std::string model, bool include_usage, std::string id,
                    int64_t created);

  const char* content_type(bool stream) const;
  // Sent once before the first piece ("" for Ollama; the role delta for OpenAI chat).
  std::string stream_start() const;
  std::string stream_piece(std::string_view piece) const;
  // Reasoning parsed from the reply (harmony's analysis channel): Ollama's "thinking" (in
  // "message" for chat), OpenAI chat's delta "reasoning_content" (as llama.cpp's server).
  std::string stream_thinking(std::string_view thinking) const;
  // Tool calls parsed from the reply (chat APIs); `first_index` numbers them across the
  // reply (OpenAI's tool_calls[].index). Ollama: a message chunk with "tool_calls";
  // OpenAI: a delta with "tool_calls" ({"index", "id", "type", "function": {"name",
  // "arguments": JSON text}}).
  std::string stream_tool_calls(const std::vector<ToolCall>& calls, size_t first_index) const;
  // The final chunk(s), including "data: [DONE]" for OpenAI.
  // made_calls: the reply called tools (OpenAI's finish_reason is then "tool_calls").
  std::string stream_end(const Outcome& outcome, bool made_calls = false) const;
  // An error after the stream began (Ollama {"error"} line, OpenAI error event + [DONE]).
  std::string stream_error(std::string_view message) const;
  // The one body of a non-streaming response.
  std::string full(const std::string& text, const Outcome& outcome,
                   const std::vector<ToolCall>& calls = {}, const std::string& thinking = {}) const;
  // Ollama's answer to a request with no prompt/messages: done_reason "load", or
  // "unload" for keep_alive 0.
  std::string load_response(std::string_view done_reason = "load") const;

 private:
  nlohmann::json ollama_base() const;
  nlohmann::json openai_base(bool chunk) const;
  // {"response"} or {"message"}, with "thinking" when not empty.
  nlohmann::json ollama_text(std::string_view text, std::string_view thinking = {}) const;
  void add_ollama_stats(const Outcome& outcome, nlohmann::json* j) const;
  nlohmann::json usage(const Outcome& outcome) const;
  nlohmann::json ollama_calls(const std::vector<ToolCall>& calls) const;
  nlohmann::json openai_calls(const std::vector<ToolCall>& calls, size_t first_index,
                              bool indexed) const;
  std::string finish_reason(const Outcome& outcome, bool made_calls) const;

  Api api_;
  std::string model_;
  bool include_usage_;
  std::string id_;
  int64_t created_;
};

// The body of an embedding response (EmbedRequest's endpoint decides the shape); every
// vector is cut to request.dimensions (truncate_dimensions) first. n_tokens: the inputs'
// tokens after truncation.
std::string embed_body(const EmbedRequest& request, std::vector<std::vector<float>> embeddings,
                       int64_t n_tokens, int64_t total_ns, int64_t load_ns);
// Keeps the first `dimensions` components (0 or more than there are: all) and normalises
// again, as Ollama's "dimensions" does.
void truncate_dimensions(int64_t dimensions, std::vector<float>* v);
// RFC 4648 base64 of the floats' little-endian bytes (OpenAI's encoding_format "base64").
std::string base64_floats(const std::vector<float>& v);

// Model listing and metadata bodies. /api/version: {"version": the Ollama API version we
// implement, "hypura_version": ours}.
std::string version_body(std::string_view ollama_version, std::string_view hypura_version);
// The loaded model, then the models `hypura pull` downloaded (each once).
std::string tags_body(const ModelInfo& info, const std::vector<store::StoredModel>& pulled = {});
// One line of /api/pull's NDJSON stream, as Ollama writes it: {"status"} and, while a file
// downloads, its "digest", "total" and "completed".
std::string pull_event_line(const store::PullEvent& e);
// The running model with the context window in force; no model when unloaded (context 0).
std::string ps_body(const ModelInfo& info, int64_t context);
// parameters "num_ctx" is the context in force (the trained length is in model_info).
std::string show_body(const ModelInfo& info, int64_t context);
std::string openai_models_body(const ModelInfo& info);
std::string openai_model_body(const ModelInfo& info);

}  // namespace hypura::server
