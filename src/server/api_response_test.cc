#include "server/api_response.h"

#include <gtest/gtest.h>

namespace hypura::server {
namespace {

using json = nlohmann::json;

Outcome outcome() {
  Outcome o;
  o.result.done_reason = "length";
  o.result.prompt_tokens = 3;
  o.result.prompt_tokens_reused = 2;
  o.result.generated_tokens = 4;
  o.result.prompt_seconds = 0.5;
  o.result.generate_seconds = 2.0;
  o.n_prompt = 5;
  o.total_ns = 3'000'000'000;
  o.load_ns = 1000;
  return o;
}

TEST(ApiResponse, Rfc3339) {
  EXPECT_EQ(rfc3339(0), "1970-01-01T00:00:00.000000000Z");
  EXPECT_EQ(rfc3339(1'700'000'000'123'456'789), "2023-11-14T22:13:20.123456789Z");
}

TEST(ApiResponse, OllamaChatFinalChunkHasEveryStat) {
  ResponseFormatter f(Api::kOllamaChat, "m", false, "x", 1);
  json piece = json::parse(f.stream_piece("h\xc3\xa9"));
  EXPECT_EQ(piece["message"]["content"], "h\xc3\xa9");
  EXPECT_EQ(piece["message"]["role"], "assistant");
  EXPECT_EQ(piece["done"], false);
  std::string end = f.stream_end(outcome());
  EXPECT_EQ(end.back(), '\n');
  json fin = json::parse(end);
  EXPECT_EQ(fin["done"], true);
  EXPECT_EQ(fin["done_reason"], "length");
  EXPECT_EQ(fin["total_duration"], 3'000'000'000);
  EXPECT_EQ(fin["load_duration"], 1000);
  EXPECT_EQ(fin["prompt_eval_count"], 5);  // the whole prompt, reused tokens included
  EXPECT_EQ(fin["prompt_eval_duration"], 500'000'000);
  EXPECT_EQ(fin["eval_count"], 4);
  EXPECT_EQ(fin["eval_duration"], 2'000'000'000);
  EXPECT_EQ(fin["model"], "m");
  EXPECT_TRUE(fin["created_at"].is_string());
  json full = json::parse(f.full("abc", outcome()));
  EXPECT_EQ(full["message"]["content"], "abc");
  EXPECT_EQ(full["eval_count"], 4);
}

TEST(ApiResponse, OllamaGenerateUsesResponseField) {
  ResponseFormatter f(Api::kOllamaGenerate, "m", false, "x", 1);
  EXPECT_EQ(json::parse(f.stream_piece("a"))["response"], "a");
  EXPECT_EQ(json::parse(f.full("abc", outcome()))["response"], "abc");
  EXPECT_EQ(json::parse(f.load_response())["done_reason"], "load");
  EXPECT_EQ(json::parse(f.load_response("unload"))["done_reason"], "unload");
  EXPECT_STREQ(f.content_type(true), "application/x-ndjson");
}

TEST(ApiResponse, InvalidUtf8NeverThrows) {
  ResponseFormatter f(Api::kOllamaGenerate, "m", false, "x", 1);
  json j = json::parse(f.stream_piece("\xff\xfe"));
  EXPECT_EQ(j["response"], "\xef\xbf\xbd\xef\xbf\xbd");
}

std::vector<json> sse_events(const std::string& s, bool* saw_done) {
  std::vector<json> events;
  size_t pos = 0;
  *saw_done = false;
  while ((pos = s.find("data: ", pos)) != std::string::npos) {
    size_t end = s.find("\n\n", pos);
    std::string data = s.substr(pos + 6, end - pos - 6);
    if (data == "[DONE]") {
      *saw_done = true;
      EXPECT_EQ(end + 2, s.size());
    } else {
      events.push_back(json::parse(data));
    }
    pos = end;
  }
  return events;
}

TEST(ApiResponse, OpenAiChatStreamWithUsage) {
  ResponseFormatter f(Api::kOpenAiChat, "m", true, "chatcmpl-1", 77);
  std::string all = f.stream_start() + f.stream_piece("hi") + f.stream_end(outcome());
  bool done = false;
  auto events = sse_events(all, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[1]["choices"][0]["delta"]["content"], "hi");
  EXPECT_EQ(events[1]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[1]["id"], "chatcmpl-1");
  EXPECT_EQ(events[2]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(events[2]["usage"].is_null());
  EXPECT_TRUE(events[3]["choices"].empty());
  EXPECT_EQ(events[3]["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(events[3]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(events[3]["usage"]["total_tokens"], 9);
}

TEST(ApiResponse, OpenAiNonStreamAndCompletion) {
  ResponseFormatter chat(Api::kOpenAiChat, "m", false, "chatcmpl-2", 77);
  json j = json::parse(chat.full("abc", outcome()));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "abc");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 9);
  ResponseFormatter cmpl(Api::kOpenAiCompletion, "m", false, "cmpl-3", 77);
  j = json::parse(cmpl.full("abc", outcome()));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  bool done = false;
  auto events = sse_events(cmpl.stream_piece("x") + cmpl.stream_end(outcome()), &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(events[0]["choices"][0]["text"], "x");
}

TEST(ApiResponse, ErrorShapes) {
  EXPECT_EQ(json::parse(ollama_error("boom"))["error"], "boom");
  json e = json::parse(error_body(Api::kOpenAiChat, 404, "nope"));
  EXPECT_EQ(e["error"]["message"], "nope");
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  EXPECT_EQ(json::parse(error_body(Api::kOllamaGenerate, 404, "nope"))["error"], "nope");
  e = json::parse(error_body(Api::kOpenAiChat, 400, "too long", "context_length_exceeded"));
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
}

TEST(ApiResponse, ToolCalls) {
  const std::vector<ToolCall> calls = {{"get_weather", {{"city", "Paris"}}}};
  Outcome o = outcome();
  o.result.done_reason = "stop";
  ResponseFormatter ollama(Api::kOllamaChat, "m", false, "x", 1);
  json j = json::parse(ollama.full("", o, calls));
  EXPECT_EQ(j["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(j["message"]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(j["done_reason"], "stop");
  j = json::parse(ollama.stream_tool_calls(calls, 0));
  EXPECT_EQ(j["done"], false);
  EXPECT_EQ(j["message"]["tool_calls"].size(), 1u);
  ResponseFormatter openai(Api::kOpenAiChat, "m", false, "chatcmpl-9", 1);
  j = json::parse(openai.full("", o, calls));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
  const json& c = j["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(c["type"], "function");
  EXPECT_EQ(json::parse(c["function"]["arguments"].get<std::string>())["city"], "Paris");
  EXPECT_FALSE(c["id"].get<std::string>().empty());
  std::string sse = openai.stream_tool_calls(calls, 2);
  j = json::parse(sse.substr(6));  // "data: "
  EXPECT_EQ(j["choices"][0]["delta"]["tool_calls"][0]["index"], 2);
  EXPECT_NE(openai.stream_end(o, true).find("\"tool_calls\""), std::string::npos);
  EXPECT_EQ(openai.stream_end(o, false).find("\"tool_calls\""), std::string::npos);
}

TEST(ApiResponse, Embeddings) {
  EmbedRequest r;
  r.model = "m";
  r.api = Api::kOllamaEmbed;
  json j = json::parse(embed_body(r, {{0.6f, 0.8f}, {1.0f, 0.0f}}, 7, 100, 5));
  EXPECT_EQ(j["embeddings"].size(), 2u);
  EXPECT_FLOAT_EQ(j["embeddings"][0][1].get<float>(), 0.8f);
  EXPECT_EQ(j["prompt_eval_count"], 7);
  r.api = Api::kOllamaEmbeddings;
  EXPECT_EQ(json::parse(embed_body(r, {{0.6f, 0.8f}}, 2, 0, 0))["embedding"].size(), 2u);
  EXPECT_TRUE(json::parse(embed_body(r, {}, 0, 0, 0))["embedding"].empty());
  r.api = Api::kOpenAiEmbeddings;
  j = json::parse(embed_body(r, {{0.6f, 0.8f}}, 2, 0, 0));
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["object"], "embedding");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  r.base64 = true;
  j = json::parse(embed_body(r, {{1.0f, -2.0f}}, 2, 0, 0));
  // 1.0f = 00 00 80 3f, -2.0f = 00 00 00 c0 (little-endian): base64 of those 8 bytes.
  EXPECT_EQ(j["data"][0]["embedding"], "AACAPwAAAMA=");
  EXPECT_EQ(base64_floats({1.0f}), "AACAPw==");
  std::vector<float> v = {0.6f, 0.0f, 0.8f};
  truncate_dimensions(1, &v);
  EXPECT_EQ(v, std::vector<float>{1.0f});  // cut, then normalised again
}

TEST(ApiResponse, Listings) {
  ModelInfo info;
  info.name = "m:latest";
  info.family = "llama";
  info.parameter_size = "1.1B";
  info.quantization_level = "Q4_K_M";
  info.size_bytes = 123;
  info.context_length = 4096;
  info.model_info = {{"general.architecture", "llama"}};
  json tags = json::parse(tags_body(info));
  EXPECT_EQ(tags["models"][0]["name"], "m:latest");
  EXPECT_EQ(tags["models"][0]["details"]["quantization_level"], "Q4_K_M");
  EXPECT_EQ(tags["models"][0]["size"], 123);
  info.created = 1'700'000'000;
  json ps = json::parse(ps_body(info, 8192));  // the context in force
  EXPECT_EQ(ps["models"][0]["context_length"], 8192);
  EXPECT_TRUE(json::parse(ps_body(info, 0))["models"].empty());  // unloaded
  json show = json::parse(show_body(info, 8192));
  EXPECT_EQ(show["parameters"], "num_ctx 8192");
  EXPECT_EQ(show["model_info"]["general.architecture"], "llama");
  EXPECT_EQ(show["details"]["family"], "llama");
  EXPECT_EQ(show["capabilities"][0], "completion");
  json models = json::parse(openai_models_body(info));
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "m:latest");
  EXPECT_EQ(models["data"][0]["created"], 1'700'000'000);
  json version = json::parse(version_body("0.9.0", "0.1.0"));
  EXPECT_EQ(version["version"], "0.9.0");
  EXPECT_EQ(version["hypura_version"], "0.1.0");
}

}  // namespace
}  // namespace hypura::server
