#include "server/api_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace hypura::server {
namespace {

GenerationRequest parse_ok(Api api, const std::string& body) {
  auto r = parse_generation_request(api, body);
  EXPECT_TRUE(r.is_ok()) << body << " -> " << r.status().message();
  return r.is_ok() ? *r : GenerationRequest{};
}

std::string parse_error(Api api, const std::string& body) {
  auto r = parse_generation_request(api, body);
  EXPECT_FALSE(r.is_ok()) << body;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(ApiRequest, OllamaChatWithOptions) {
  auto req = parse_ok(Api::kOllamaChat, R"({
    "model": "m", "stream": false, "keep_alive": "5m", "format": "json",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    "options": {"temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "repeat_penalty": 1.2,
                "repeat_last_n": 32, "seed": 42, "num_predict": 7, "num_ctx": 128,
                "stop": ["\n", "END"], "mirostat": 0}})");
  EXPECT_EQ(req.model, "m");
  EXPECT_FALSE(req.stream);
  EXPECT_EQ(req.format, "json");
  ASSERT_EQ(req.messages.size(), 2u);
  EXPECT_EQ(req.messages[0].role, "system");
  EXPECT_EQ(req.messages[1].content, "hi");
  EXPECT_EQ(req.sampling.temperature, 0.0f);
  EXPECT_EQ(req.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(req.sampling.top_p, 0.5f);
  EXPECT_FLOAT_EQ(req.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(req.sampling.repeat_penalty, 1.2f);
  EXPECT_EQ(req.sampling.repeat_last_n, 32);
  EXPECT_TRUE(req.seed_given);
  EXPECT_EQ(req.sampling.seed, 42u);
  EXPECT_EQ(req.num_predict, 7);
  EXPECT_EQ(req.num_ctx, 128);
  EXPECT_EQ(req.stop, (std::vector<std::string>{"\n", "END"}));
}

TEST(ApiRequest, OllamaDefaults) {
  auto req = parse_ok(Api::kOllamaGenerate, R"({"model": "m", "prompt": "p", "options": null})");
  runtime::SamplingParams defaults;
  EXPECT_TRUE(req.stream);
  EXPECT_EQ(req.num_predict, -1);
  EXPECT_FALSE(req.seed_given);
  EXPECT_EQ(req.sampling.temperature, defaults.temperature);
  EXPECT_EQ(req.sampling.top_k, defaults.top_k);
  EXPECT_EQ(req.prompt, "p");
}

TEST(ApiRequest, IntegersMayBeIntegralFloatsAndSeedMinusOneIsRandom) {
  auto req =
      parse_ok(Api::kOllamaGenerate,
               R"({"model": "m", "options": {"top_k": 40.0, "seed": -1, "num_predict": -2}})");
  EXPECT_EQ(req.sampling.top_k, 40);
  EXPECT_FALSE(req.seed_given);
  EXPECT_EQ(req.num_predict, -1);
}

TEST(ApiRequest, GenerateFields) {
  auto req = parse_ok(Api::kOllamaGenerate,
                      R"({"model": "m", "prompt": "p", "system": "s", "template": "{{ .Prompt }}",
                          "raw": true, "images": [], "context": [1, 2], "format": {"type": "object"}})");
  EXPECT_EQ(req.system, "s");
  EXPECT_EQ(req.prompt_template, "{{ .Prompt }}");
  EXPECT_TRUE(req.raw);
  EXPECT_EQ(req.format, "schema");
}

TEST(ApiRequest, BadRequestsNameTheField) {
  EXPECT_EQ(parse_error(Api::kOllamaChat, "{not json"), "invalid JSON in request body");
  EXPECT_EQ(parse_error(Api::kOllamaChat, "[1, 2]"), "request body must be a JSON object");
  EXPECT_EQ(parse_error(Api::kOllamaChat, R"({"messages": []})"), "model is required");
  EXPECT_NE(parse_error(Api::kOllamaChat, R"({"model": 3})").find("\"model\""), std::string::npos);
  EXPECT_NE(parse_error(Api::kOllamaChat, R"({"model": "m", "stream": "yes"})").find("boolean"),
            std::string::npos);
  EXPECT_NE(parse_error(Api::kOllamaChat, R"({"model": "m", "options": {"top_k": "5"}})")
                .find("options.top_k"),
            std::string::npos);
  EXPECT_NE(
      parse_error(Api::kOllamaChat, R"({"model": "m", "options": {"top_k": 1.5}})").find("integer"),
      std::string::npos);
  EXPECT_NE(parse_error(Api::kOllamaChat, R"({"model": "m", "options": {"temperature": -1}})")
                .find("options.temperature"),
            std::string::npos);
  EXPECT_NE(parse_error(Api::kOllamaChat, R"({"model": "m", "options": {"top_p": 2}})")
                .find("options.top_p"),
            std::string::npos);
  EXPECT_NE(parse_error(Api::kOllamaChat, R"({"model": "m", "options": {"stop": [1]}})")
                .find("options.stop"),
            std::string::npos);
  EXPECT_NE(parse_error(Api::kOllamaChat, R"({"model": "m", "messages": {}})").find("messages"),
            std::string::npos);
  EXPECT_NE(parse_error(Api::kOllamaChat, R"({"model": "m", "messages": [5]})").find("messages[0]"),
            std::string::npos);
  EXPECT_NE(parse_error(Api::kOllamaChat, R"({"model": "m", "format": "xml"})").find("format"),
            std::string::npos);
  EXPECT_NE(parse_error(Api::kOllamaChat, R"({"model": "m", "keep_alive": []})").find("keep_alive"),
            std::string::npos);
}

TEST(ApiRequest, UnknownRolesAndImagesAreRejected) {
  std::string msg = parse_error(
      Api::kOllamaChat,
      R"({"model": "m", "messages": [{"role": "user"}, {"role": "wizard", "content": "x"}]})");
  EXPECT_NE(msg.find("messages[1].role"), std::string::npos);
  EXPECT_NE(msg.find("wizard"), std::string::npos);
  msg = parse_error(
      Api::kOllamaChat,
      R"({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]})");
  EXPECT_NE(msg.find("images are not supported"), std::string::npos);
  msg = parse_error(Api::kOllamaGenerate, R"({"model": "m", "prompt": "x", "images": ["aGk="]})");
  EXPECT_NE(msg.find("images are not supported"), std::string::npos);
  msg = parse_error(Api::kOpenAiChat, R"({"model": "m", "messages": [{"role": "user", "content":
      [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}]})");
  EXPECT_NE(msg.find("image_url"), std::string::npos);
  msg = parse_error(Api::kOpenAiChat,
                    R"({"model": "m", "messages": [{"role": "function", "content": "x"}]})");
  EXPECT_NE(msg.find("unknown role"), std::string::npos);
}

TEST(ApiRequest, ToolsAndToolMessages) {
  // Ollama: arguments are objects; a tool's result names the tool.
  GenerationRequest r = parse_ok(Api::kOllamaChat, R"({"model": "m",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "messages": [{"role": "user", "content": "q"},
                 {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
                 {"role": "tool", "content": "42", "tool_name": "f"}]})");
  EXPECT_EQ(nlohmann::json::parse(r.tools)[0]["function"]["name"], "f");
  EXPECT_EQ(nlohmann::json::parse(r.messages[1].tool_calls),
            nlohmann::json::parse(R"([{"name": "f", "arguments": {"x": 1}}])"));
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_name, "f");
  // OpenAI: arguments are a JSON string; content may be null; tool_choice "none" drops tools.
  r = parse_ok(Api::kOpenAiChat, R"({"model": "m", "tool_choice": "auto",
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "messages": [{"role": "assistant", "content": null,
                  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 2}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "7"}]})");
  EXPECT_FALSE(r.tools.empty());
  EXPECT_EQ(nlohmann::json::parse(r.messages[0].tool_calls)[0]["arguments"]["x"], 2);
  r = parse_ok(Api::kOpenAiChat, R"({"model": "m", "tool_choice": "none",
    "tools": [{"type": "function", "function": {"name": "f"}}], "messages": [{"role": "user", "content": "q"}]})");
  EXPECT_TRUE(r.tools.empty());
  for (const char* bad :
       {R"({"model": "m", "tools": {}, "messages": []})",
        R"({"model": "m", "tools": [{"type": "web"}], "messages": []})",
        R"({"model": "m", "tools": [{"type": "function", "function": {}}], "messages": []})",
        R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"x": 1}]}]})"}) {
    parse_error(Api::kOllamaChat, bad);
  }
}

// OpenAI's reasoning_effort reaches the chat template (gpt-oss's reads it).
TEST(ApiRequest, ReasoningEffort) {
  auto req = parse_ok(Api::kOpenAiChat, R"({"model": "m", "reasoning_effort": "high",
    "messages": [{"role": "user", "content": "q"}]})");
  EXPECT_EQ(req.reasoning_effort, "high");
  req = parse_ok(Api::kOpenAiChat,
                 R"({"model": "m", "messages": [{"role": "user", "content": "q"}]})");
  EXPECT_EQ(req.reasoning_effort, "");
  EXPECT_NE(parse_error(Api::kOpenAiChat, R"({"model": "m", "reasoning_effort": "max",
    "messages": [{"role": "user", "content": "q"}]})")
                .find("\"reasoning_effort\": must be"),
            std::string::npos);
  EXPECT_NE(parse_error(Api::kOpenAiChat, R"({"model": "m", "reasoning_effort": 2,
    "messages": [{"role": "user", "content": "q"}]})")
                .find("reasoning_effort"),
            std::string::npos);
}

TEST(ApiRequest, OpenAiChat) {
  auto req = parse_ok(Api::kOpenAiChat, R"({
    "model": "m", "stream": true, "stream_options": {"include_usage": true},
    "max_tokens": 9, "temperature": 0.2, "seed": 3, "stop": "###", "n": 1,
    "response_format": {"type": "json_object"}, "presence_penalty": 0.5,
    "messages": [{"role": "developer", "content": "sys"},
                 {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                 {"role": "assistant", "content": null}]})");
  EXPECT_TRUE(req.stream);
  EXPECT_TRUE(req.include_usage);
  EXPECT_EQ(req.num_predict, 9);
  EXPECT_FLOAT_EQ(req.sampling.temperature, 0.2f);
  EXPECT_EQ(req.sampling.seed, 3u);
  EXPECT_EQ(req.stop, std::vector<std::string>{"###"});
  EXPECT_EQ(req.format, "json");
  ASSERT_EQ(req.messages.size(), 3u);
  EXPECT_EQ(req.messages[0].role, "system");
  EXPECT_EQ(req.messages[1].content, "ab");
  EXPECT_EQ(req.messages[2].content, "");
}

TEST(ApiRequest, OpenAiDefaultsAndLimits) {
  auto req = parse_ok(Api::kOpenAiChat,
                      R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_FALSE(req.stream);
  EXPECT_EQ(req.sampling.temperature, 1.0f);
  EXPECT_EQ(req.sampling.top_p, 1.0f);
  EXPECT_EQ(req.num_predict, -1);
  EXPECT_NE(parse_error(Api::kOpenAiChat, R"({"model": "m", "messages": []})").find("empty"),
            std::string::npos);
  EXPECT_NE(
      parse_error(Api::kOpenAiChat, R"({"model": "m", "n": 2, "messages": [{"role": "user"}]})")
          .find("\"n\""),
      std::string::npos);
  auto completion = parse_ok(Api::kOpenAiCompletion, R"({"model": "m", "prompt": ["once"]})");
  EXPECT_EQ(completion.prompt, "once");
  EXPECT_EQ(completion.num_predict, 16);
  EXPECT_TRUE(completion.raw);
  parse_error(Api::kOpenAiCompletion, R"({"model": "m", "prompt": ["a", "b"]})");
  parse_error(Api::kOpenAiCompletion, R"({"model": "m", "prompt": "a", "echo": true})");
}

TEST(ApiRequest, StopStringLimits) {
  RequestLimits limits;
  limits.max_stop_strings = 2;
  auto r = parse_generation_request(
      Api::kOllamaGenerate, R"({"model": "m", "options": {"stop": ["a", "b", "c"]}})", limits);
  EXPECT_FALSE(r.is_ok());
}

TEST(ApiRequest, ShowAndNames) {
  EXPECT_EQ(*parse_show_request(R"({"model": "a:latest"})"), "a:latest");
  EXPECT_EQ(*parse_show_request(R"({"name": "b"})"), "b");
  EXPECT_FALSE(parse_show_request("{}").is_ok());
  EXPECT_FALSE(parse_show_request(R"({"model": 1})").is_ok());
  EXPECT_EQ(normalize_model_name("x:latest"), "x");
  EXPECT_EQ(normalize_model_name("x:7b"), "x:7b");
  EXPECT_EQ(normalize_model_name(":latest"), ":latest");
}

// Issue 14: 4 MB of '[' made nlohmann's parser build millions of nested values (~90x the
// body) before failing. Nesting is bounded before parsing, on both parsers.
TEST(ApiRequest, EmbedRequests) {
  auto r = parse_embed_request(Api::kOllamaEmbed,
                               R"({"model": "m", "input": ["a", "b"], "truncate": false,
                                                      "dimensions": 4, "keep_alive": 0, "options": {"num_ctx": 99}})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->texts, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(r->truncate);
  EXPECT_EQ(r->dimensions, 4);
  EXPECT_TRUE(r->unload);
  EXPECT_EQ(r->num_ctx, 99);
  r = parse_embed_request(Api::kOllamaEmbeddings, R"({"model": "m", "prompt": "one"})");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->texts, (std::vector<std::string>{"one"}));
  r = parse_embed_request(Api::kOpenAiEmbeddings,
                          R"({"model": "m", "input": [[1, 2], [3]], "encoding_format": "base64"})");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->token_inputs, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  EXPECT_TRUE(r->base64);
  r = parse_embed_request(Api::kOpenAiEmbeddings, R"({"model": "m", "input": [5, 6]})");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->token_inputs, (std::vector<std::vector<int32_t>>{{5, 6}}));
  for (const char* bad :
       {R"({"model": "m"})", R"({"model": "m", "input": 3})", R"({"input": "x"})",
        R"({"model": "m", "input": ["a", [1]]})", R"({"model": "m", "input": [-1]})"}) {
    EXPECT_FALSE(parse_embed_request(Api::kOpenAiEmbeddings, bad).is_ok()) << bad;
  }
  EXPECT_FALSE(parse_embed_request(Api::kOllamaEmbed, R"({"model": "m", "input": [[1]]})")
                   .is_ok());  // text only
  EXPECT_FALSE(parse_embed_request(Api::kOpenAiEmbeddings,
                                   R"({"model": "m", "input": "x", "encoding_format": "hex"})")
                   .is_ok());
}

TEST(ApiRequest, DeepNestingIsRefusedBeforeParsing) {
  const std::string brackets(4u << 20, '[');
  EXPECT_NE(parse_error(Api::kOllamaChat, brackets).find("nests deeper than 64 levels"),
            std::string::npos);
  auto show = parse_show_request(brackets);
  ASSERT_FALSE(show.is_ok());
  EXPECT_NE(show.status().message().find("nests deeper"), std::string::npos);

  auto nested = [](int depth) {
    return R"({"model": "m", "prompt": "hi", "x": )" + std::string(depth - 1, '[') +
           std::string(depth - 1, ']') + "}";
  };
  parse_ok(Api::kOllamaGenerate, nested(kMaxJsonDepth));
  EXPECT_NE(parse_error(Api::kOllamaGenerate, nested(kMaxJsonDepth + 1)).find("nests deeper"),
            std::string::npos);
  // Brackets inside strings (escaped quotes included) are text, not nesting.
  parse_ok(Api::kOllamaGenerate,
           R"({"model": "m", "prompt": "\"[[[)" + std::string(100, '[') + "\"}");
}

}  // namespace
}  // namespace hypura::server

namespace hypura::server {
namespace {

TEST(ApiRequest, FormatsCompileToGrammars) {
  Result<GenerationRequest> r =
      parse_generation_request(Api::kOllamaChat, R"({"model": "m", "format": "json"})");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->grammar, grammar::any_json_object_grammar());
  r = parse_generation_request(
      Api::kOllamaGenerate,
      R"({"model": "m", "format": {"type": "object", "properties": {"a": {"type": "integer"}}}})");
  ASSERT_TRUE(r.is_ok());
  ASSERT_NE(r->grammar, nullptr);
  EXPECT_EQ(r->grammar->nodes[r->grammar->root].kind, grammar::NodeKind::kObject);
  r = parse_generation_request(Api::kOpenAiChat,
                               R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
      "schema": {"type": "array", "items": {"type": "string"}}}}})");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->grammar->nodes[r->grammar->root].kind, grammar::NodeKind::kArray);
  r = parse_generation_request(
      Api::kOpenAiCompletion,
      R"({"model": "m", "prompt": "x", "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->grammar, grammar::any_json_object_grammar());
  r = parse_generation_request(Api::kOpenAiChat,
                               R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "text"}})");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->grammar, nullptr);
}

TEST(ApiRequest, UnsupportedSchemaKeywordsAre400s) {
  Result<GenerationRequest> r = parse_generation_request(
      Api::kOllamaChat, R"({"model": "m", "format": {"type": "string", "pattern": "^a"}})");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            "\"format\": JSON schema keyword \"pattern\" at # is not supported");
  r = parse_generation_request(Api::kOpenAiChat,
                               R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema":
      {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}}}})");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            "\"response_format.json_schema.schema\": JSON schema keyword \"format\" at "
            "#/properties/d is not supported");
  r = parse_generation_request(Api::kOpenAiChat,
                               R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema"}})");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("response_format.json_schema"), std::string::npos);
}

}  // namespace
}  // namespace hypura::server
