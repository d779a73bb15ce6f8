// Parsing of generation requests (Ollama and OpenAI dialects) into one plain struct.
//
// Every function here is pure: it takes the request body as untrusted bytes and returns
// either a fully validated GenerationRequest or a Status whose message names the bad
// field (HTTP 400). They never throw, never allocate without bound beyond the body size,
// and are the surface that fuzz/http_request_fuzz.cc exercises.
//
// Field names follow the upstream APIs:
//   Ollama  POST /api/generate  model prompt suffix system template raw format images
//                               options stream keep_alive think (context: accepted)
//   Ollama  POST /api/chat      model messages[{role, content, images}] format options
//                               stream keep_alive
//   OpenAI  POST /v1/chat/completions  model messages[{role, content: str | [parts]}]
//                               temperature top_p max_tokens max_completion_tokens seed
//                               stop n stream stream_options.include_usage response_format
//   OpenAI  POST /v1/completions       model prompt (str | [str]) suffix max_tokens ... echo
//                               response_format (an extension, as llama.cpp's server)
// Unknown top-level fields and unknown Ollama option names are ignored (as upstream
// does); known fields of the wrong JSON type are errors.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "grammar/json_schema.h"
#include "runtime/session.h"

namespace hypura::server {

enum class Api {
  kOllamaGenerate,    // POST /api/generate
  kOllamaChat,        // POST /api/chat
  kOpenAiChat,        // POST /v1/chat/completions
  kOpenAiCompletion,  // POST /v1/completions
  kOllamaEmbed,       // POST /api/embed
  kOllamaEmbeddings,  // POST /api/embeddings (Ollama's older endpoint)
  kOpenAiEmbeddings,  // POST /v1/embeddings
};

// Whether the API speaks Ollama's NDJSON or OpenAI's SSE dialect.
inline bool is_openai(Api api) {
  return api == Api::kOpenAiChat || api == Api::kOpenAiCompletion || api == Api::kOpenAiEmbeddings;
}

// A validated generation request, independent of the dialect it came in.
struct GenerationRequest {
  Api api = Api::kOllamaGenerate;
  std::string model;
  // Chat APIs: the conversation; roles are "system", "user" or "assistant".
  std::vector<runtime::ChatMessage> messages;
  // Generate/completion APIs.
  std::string prompt;
  std::string suffix;           // text after the insertion point (fill-in-the-middle)
  std::string system;           // /api/generate "system"
  std::string prompt_template;  // /api/generate "template" (Ollama Go-template subset)
  bool raw = false;             // /api/generate "raw": prompt is tokenized as is
  bool stream = true;           // Ollama default true, OpenAI default false
  bool include_usage = false;   // OpenAI stream_options.include_usage
  std::string format;           // "", "json" or "schema" (see docs/SERVER.md)
  // The grammar that format/response_format compiles to (null: free text); an unsupported
  // schema keyword is a 400 at parse time.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Chat APIs' "tools": the definitions as a JSON array (OpenAI's shape), "" for none
  // (also after OpenAI's tool_choice "none").
  std::string tools;
  // OpenAI chat's "reasoning_effort" or Ollama's "think" as a level: "low", "medium",
  // "high", or "" (the model's default).
  std::string reasoning_effort;
  // Ollama's "think": false leaves the reasoning parsed from a reply out of the response.
  bool show_thinking = true;
  bool unload = false;  // keep_alive 0: unload the model after this request

  runtime::SamplingParams sampling;
  bool seed_given = false;        // false: the server picks a fresh seed
  int num_predict = -1;           // tokens to generate; -1: until the context is full
  int64_t num_ctx = 0;            // options.num_ctx: context window wanted; 0: --context
  std::vector<std::string> stop;  // stop strings
};

// A validated embedding request (docs/SERVER.md "Embeddings"):
//   /api/embed       model input (str | [str]) truncate (default true) dimensions
//                    options.num_ctx keep_alive
//   /api/embeddings  model prompt (str) options keep_alive
//   /v1/embeddings   model input (str | [str] | [int] | [[int]]) encoding_format
//                    ("float" | "base64") dimensions
struct EmbedRequest {
  Api api = Api::kOllamaEmbed;
  std::string model;
  std::vector<std::string> texts;                  // inputs given as text
  std::vector<std::vector<int32_t>> token_inputs;  // /v1 inputs given as token ids
  bool truncate = true;    // cut inputs longer than the context (false: 400)
  int64_t num_ctx = 0;     // options.num_ctx; 0: --context
  int64_t dimensions = 0;  // keep this many components (then normalise again); 0: all
  bool base64 = false;     // /v1 encoding_format "base64"
  bool unload = false;     // keep_alive 0
};

// Limits on what a request may contain (besides the body size, enforced by the HTTP layer).
struct RequestLimits {
  size_t max_stop_strings = 16;
  size_t max_stop_length = 256;  // bytes per stop string
  size_t max_messages = 4096;
  size_t max_inputs = 2048;  // embedding inputs per request (OpenAI's limit)
};

// Deepest nesting of arrays and objects a body may have. nlohmann's parser builds a value
// per bracket, many times the body's size, so deeper bodies are refused before parsing.
constexpr int kMaxJsonDepth = 64;

// Whether `text`'s arrays and objects nest at most max_depth deep. A scan of brackets
// outside strings, no allocation; says nothing else about the text's validity.
bool json_depth_within(std::string_view text, int max_depth);

// Parses a request body of the given API. Errors are kInvalidArgument with a message
// fit for the client (e.g. `"options.top_k": expected an integer`).
Result<GenerationRequest> parse_generation_request(Api api, std::string_view body,
                                                   const RequestLimits& limits = {});

// Parses an embedding request (api: kOllamaEmbed, kOllamaEmbeddings or kOpenAiEmbeddings).
Result<EmbedRequest> parse_embed_request(Api api, std::string_view body,
                                         const RequestLimits& limits = {});

// POST /api/show body: {"model": "..."} (Ollama also accepts the older "name"); the same
// for DELETE /api/delete.
Result<std::string> parse_show_request(std::string_view body);

// POST /api/pull body: {"model": "hf.co/ORG/REPO[:QUANT]" or a .gguf URL, "stream": true}.
struct PullRequest {
  std::string model;
  bool stream = true;
};
Result<PullRequest> parse_pull_request(std::string_view body);

// Whether an Ollama keep_alive value (a number of seconds or a Go duration such as "0",
// "0s", "5m", "-1") is zero: the model is to be unloaded after the request.
bool keep_alive_is_zero(const nlohmann::json& value);

// Strips an Ollama ":latest" tag so "m" and "m:latest" name the same model.
std::string normalize_model_name(std::string_view name);

}  // namespace hypura::server
