// The HTTP layer end to end over loopback, with the fake engine (deterministic tokens).
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/testing/fake_engine.h"
#include "server/testing/server_fixture.h"
#include "store/testing/fake_hub.h"

namespace hypura::server {
namespace {

using json = nlohmann::json;
using testing::FakeConfig;
using testing::FakeEngine;
using testing::FakeHostMemory;
using testing::GenerationGate;
using testing::ServerTest;

std::vector<json> ndjson(const std::string& body) {
  std::vector<json> lines;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find('\n', pos);
    EXPECT_NE(end, std::string::npos) << "NDJSON lines end with a newline";
    if (end == std::string::npos) break;
    lines.push_back(json::parse(body.substr(pos, end - pos)));
    pos = end + 1;
  }
  return lines;
}

json chat_body(bool stream, const std::string& content = "hi") {
  return {{"model", "fake"},
          {"stream", stream},
          {"options", {{"temperature", 0}}},
          {"messages", json::array({{{"role", "user"}, {"content", content}}})}};
}

TEST_F(ServerTest, StatusAndListings) {
  start();
  auto root = client().Get("/");
  ASSERT_TRUE(root);
  EXPECT_EQ(root->status, 200);
  EXPECT_EQ(root->body, "Hypura is running");
  auto head = client().Head("/");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  json version = json::parse(client().Get("/api/version")->body);
  EXPECT_EQ(version["version"], "0.9.0");  // an Ollama API version clients accept (>= 0.6.4)
  EXPECT_EQ(version["hypura_version"], "0.1.0");
  EXPECT_EQ(json::parse(client().Get("/api/tags")->body)["models"][0]["name"], "fake:latest");
  EXPECT_EQ(json::parse(client().Get("/api/ps")->body)["models"][0]["context_length"], 256);
  EXPECT_EQ(json::parse(client().Get("/v1/models")->body)["data"][0]["id"], "fake:latest");
  EXPECT_EQ(client().Get("/v1/models/fake")->status, 200);
  EXPECT_EQ(client().Get("/v1/models/other")->status, 404);
  auto show = post("/api/show", {{"model", "fake:latest"}});
  EXPECT_EQ(show->status, 200);
  EXPECT_EQ(json::parse(show->body)["model_info"]["general.architecture"], "fake");
  auto missing = post("/api/show", {{"model", "llama3"}});
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(json::parse(missing->body)["error"].is_string());
  auto unknown = client().Get("/api/nothing");
  EXPECT_EQ(unknown->status, 404);
  EXPECT_TRUE(json::parse(unknown->body)["error"].is_string());
}

// Browsers get the chat page at /, byte for byte the file in the source tree (embedded at
// build time), self-contained; every other client keeps the plain-text answer.
TEST_F(ServerTest, RootServesChatPageToBrowsers) {
  start();
  httplib::Client c = client();
  auto page = c.Get("/", {{"Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("connect-src 'self'"),
            std::string::npos);
  std::ifstream file(std::string(HYPURA_SOURCE_DIR) + "/src/server/chat_page.html",
                     std::ios::binary);
  ASSERT_TRUE(file);
  const std::string source((std::istreambuf_iterator<char>(file)), {});
  EXPECT_EQ(page->body, source);
  for (const char* id : {"id=\"prompt\"", "id=\"send\"", "id=\"stop\"", "id=\"model\"",
                         "id=\"messages\"", "/api/chat", "/api/tags"}) {
    EXPECT_NE(page->body.find(id), std::string::npos) << id;
  }
  std::string lower = page->body;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  for (const char* external : {"src=\"http", "src='http", "href=\"http", "href='http", "url(http",
                               "@import", "cdn", "//fonts."}) {
    EXPECT_EQ(lower.find(external), std::string::npos) << external;
  }

  for (const httplib::Headers& headers : {httplib::Headers{}, httplib::Headers{{"Accept", "*/*"}},
                                          httplib::Headers{{"Accept", "application/json"}}}) {
    auto plain = c.Get("/", headers);
    ASSERT_TRUE(plain);
    EXPECT_EQ(plain->status, 200);
    EXPECT_EQ(plain->body, "Hypura is running");
    EXPECT_EQ(plain->get_header_value("Content-Type"), "text/plain; charset=utf-8");
  }
}

TEST_F(ServerTest, ChatStreamMatchesNonStreamAndHasStats) {
  start();
  auto whole = post("/api/chat", chat_body(false));
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  json one = json::parse(whole->body);
  EXPECT_EQ(one["done"], true);
  EXPECT_EQ(one["done_reason"], "stop");
  std::string text = one["message"]["content"];
  EXPECT_FALSE(text.empty());
  for (const char* k : {"total_duration", "load_duration", "prompt_eval_count",
                        "prompt_eval_duration", "eval_count", "eval_duration"}) {
    ASSERT_TRUE(one[k].is_number_integer()) << k;
  }
  EXPECT_GT(one["eval_count"].get<int>(), 0);
  EXPECT_GE(one["total_duration"].get<int64_t>(), one["eval_duration"].get<int64_t>());

  auto streamed = post("/api/chat", chat_body(true));
  ASSERT_EQ(streamed->status, 200);
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "application/x-ndjson");
  auto lines = ndjson(streamed->body);
  ASSERT_GE(lines.size(), 2u);
  std::string joined;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["done"], false);
    joined += lines[i]["message"]["content"].get<std::string>();
  }
  EXPECT_EQ(joined, text);  // greedy: same answer streamed or not
  EXPECT_EQ(lines.back()["done"], true);
  EXPECT_EQ(lines.back()["eval_count"], one["eval_count"]);
  EXPECT_EQ(static_cast<int>(lines.size()) - 1, one["eval_count"].get<int>());
}

TEST_F(ServerTest, GenerateHonoursNumPredictStopAndSeed) {
  start();
  json body = {{"model", "fake"},
               {"prompt", "once"},
               {"stream", false},
               {"options", {{"num_predict", 3}, {"temperature", 0.8}, {"seed", 5}}}};
  json a = json::parse(post("/api/generate", body)->body);
  EXPECT_EQ(a["eval_count"], 3);
  EXPECT_EQ(a["done_reason"], "length");
  json b = json::parse(post("/api/generate", body)->body);
  EXPECT_EQ(a["response"], b["response"]);  // same seed, same output
  body["options"]["seed"] = 6;
  body["options"]["num_predict"] = 30;
  json c = json::parse(post("/api/generate", body)->body);
  body["options"]["seed"] = 7;
  json d = json::parse(post("/api/generate", body)->body);
  EXPECT_NE(c["response"], d["response"]);
  // A stop string taken from the answer ends it there, excluded.
  std::string full = c["response"];
  size_t cut = full.find(' ', 3);
  ASSERT_NE(cut, std::string::npos);
  body["options"]["seed"] = 6;
  body["options"]["stop"] = {full.substr(cut, 3)};
  json e = json::parse(post("/api/generate", body)->body);
  EXPECT_EQ(e["done_reason"], "stop");
  EXPECT_EQ(full.substr(0, e["response"].get<std::string>().size()), e["response"]);
  EXPECT_EQ(e["response"].get<std::string>().find(full.substr(cut, 3)), std::string::npos);
}

TEST_F(ServerTest, ChatReusesTheKvPrefix) {
  start(FakeConfig{.n_ctx = 1024});  // room for the whole conversation: no turn is dropped
  json first = json::parse(post("/api/chat", chat_body(false, "first question"))->body);
  json body = chat_body(false, "first question");
  body["messages"].push_back({{"role", "assistant"}, {"content", first["message"]["content"]}});
  body["messages"].push_back({{"role", "user"}, {"content", "and then?"}});
  json second = json::parse(post("/api/chat", body)->body);
  // The whole first prompt is reused (the fake's generated tokens differ from the
  // re-tokenized answer, so reuse stops there).
  EXPECT_EQ(engine_->last_session->last_reused.load(), first["prompt_eval_count"].get<int>());
  // prompt_eval_count counts the whole prompt, as Ollama does (and as /v1 usage does).
  json usage = json::parse(post("/v1/chat/completions", body)->body)["usage"];
  EXPECT_EQ(second["prompt_eval_count"].get<int>(), usage["prompt_tokens"].get<int>());
  EXPECT_GT(second["prompt_eval_count"].get<int>(), engine_->last_session->last_reused.load());
}

TEST_F(ServerTest, OpenAiChatSseWithUsage) {
  start();
  json body = {{"model", "fake:latest"},
               {"stream", true},
               {"temperature", 0},
               {"stream_options", {{"include_usage", true}}},
               {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  auto res = post("/v1/chat/completions", body);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::string& s = res->body;
  ASSERT_GE(s.size(), 14u);
  EXPECT_EQ(s.substr(s.size() - 14), "data: [DONE]\n\n");
  body["stream"] = false;
  json whole = json::parse(post("/v1/chat/completions", body)->body);
  EXPECT_EQ(whole["object"], "chat.completion");
  std::string text = whole["choices"][0]["message"]["content"];
  std::string joined;
  json usage;
  for (size_t pos = 0; (pos = s.find("data: {", pos)) != std::string::npos; ++pos) {
    json ev = json::parse(s.substr(pos + 6, s.find("\n\n", pos) - pos - 6));
    if (!ev["usage"].is_null()) usage = ev["usage"];
    if (!ev["choices"].empty() && ev["choices"][0]["delta"].contains("content")) {
      joined += ev["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(usage["completion_tokens"], whole["usage"]["completion_tokens"]);
  EXPECT_EQ(usage["prompt_tokens"], whole["usage"]["prompt_tokens"]);
  json cmpl = json::parse(
      post("/v1/completions", {{"model", "fake"}, {"prompt", "x"}, {"max_tokens", 2}})->body);
  EXPECT_EQ(cmpl["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(cmpl["usage"]["completion_tokens"], 2);
}

// A harmony model (gpt-oss): the reply's markup is parsed into reasoning and content, in
// both APIs, streamed or not; Ollama's "think": false drops the reasoning; raw prompts are
// not in the model's format and pass as they come.
TEST_F(ServerTest, HarmonyRepliesSplitIntoThinkingAndContent) {
  FakeConfig config;
  config.harmony = true;
  start(config);
  json one = json::parse(post("/api/chat", chat_body(false))->body);
  EXPECT_EQ(one["message"]["thinking"], "The user wants words.");
  const std::string text = one["message"]["content"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.find("<|"), std::string::npos) << text;

  std::string thinking, joined;
  for (const json& line : ndjson(post("/api/chat", chat_body(true))->body)) {
    thinking += line["message"].value("thinking", "");
    joined += line["message"]["content"].get<std::string>();
  }
  EXPECT_EQ(thinking, "The user wants words.");
  EXPECT_EQ(joined, text);

  json no_think = chat_body(false);
  no_think["think"] = false;
  json hidden = json::parse(post("/api/chat", no_think)->body);
  EXPECT_FALSE(hidden["message"].contains("thinking"));
  EXPECT_EQ(hidden["message"]["content"], text);
  no_think["think"] = "sometimes";
  EXPECT_EQ(post("/api/chat", no_think)->status, 400);

  json openai = {{"model", "fake"},
                 {"temperature", 0},
                 {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  json whole = json::parse(post("/v1/chat/completions", openai)->body);
  EXPECT_EQ(whole["choices"][0]["message"]["reasoning_content"], "The user wants words.");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], text);

  json raw = json::parse(
      post("/api/generate", {{"model", "fake"}, {"prompt", "x"}, {"raw", true}, {"stream", false}})
          ->body);
  EXPECT_EQ(raw["response"].get<std::string>().rfind("<|channel|>analysis", 0), 0u);
  EXPECT_FALSE(raw.contains("thinking"));
}

TEST_F(ServerTest, BadRequestsGet400Json) {
  ServerOptions options;
  options.max_body_bytes = 2048;
  start({}, options);
  auto check = [&](const std::string& path, const std::string& body, int status) -> json {
    auto res = client().Post(path.c_str(), body, "application/json");
    if (!res) {
      ADD_FAILURE() << "no response to " << body;
      return json();
    }
    EXPECT_EQ(res->status, status) << body;
    json j = json::parse(res->body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << res->body;
    EXPECT_TRUE(j.contains("error")) << res->body;
    return j;
  };
  check("/api/chat", "{oops", 400);
  check("/api/chat", R"({"model": "fake", "messages": [{"role": "robot", "content": "x"}]})", 400);
  check("/api/generate", R"({"model": "fake", "prompt": "x", "images": ["AAAA"]})", 400);
  check("/api/generate", R"({"model": "fake", "prompt": 5})", 400);
  check("/api/generate", std::string(4096, ' '), 400);  // over --max-body
  json long_prompt = {{"model", "fake"}, {"prompt", std::string(300, 'a')}, {"raw", true}};
  json j = check("/api/generate", long_prompt.dump(), 400);  // 301 tokens > 256
  EXPECT_NE(j["error"].get<std::string>().find("context"), std::string::npos);
  json other = chat_body(false);
  other["model"] = "gpt4";
  j = check("/api/chat", other.dump(), 404);
  EXPECT_NE(j["error"].get<std::string>().find("not found"), std::string::npos);
  j = check("/v1/chat/completions",
            R"({"model": "nope", "messages": [{"role": "user", "content": "x"}]})", 404);
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  j = check("/v1/chat/completions", R"({"model": "fake", "messages": "x"})", 400);
  EXPECT_TRUE(j["error"]["message"].is_string());
  // Load requests (no prompt) answer at once.
  auto load = post("/api/generate", {{"model", "fake"}});
  EXPECT_EQ(json::parse(load->body)["done_reason"], "load");
}

// Issue 18 item 1: a conversation longer than the context keeps being answered on
// /api/chat (oldest turns dropped); /v1 answers OpenAI's context_length_exceeded.
TEST_F(ServerTest, LongChatDropsOldTurnsOnOllamaAnd400OnOpenAi) {
  start();  // 256-token context; the fake's tokens are bytes
  json body = {
      {"model", "fake"}, {"stream", false}, {"options", {{"temperature", 0}, {"num_predict", 8}}}};
  body["messages"] = json::array({{{"role", "system"}, {"content", "SYSTEM-RULES"}}});
  for (int i = 0; i < 12; ++i) {
    body["messages"].push_back(
        {{"role", "user"}, {"content", "question " + std::to_string(i) + std::string(20, 'q')}});
    body["messages"].push_back(
        {{"role", "assistant"}, {"content", "answer " + std::to_string(i) + std::string(20, 'a')}});
  }
  body["messages"].push_back({{"role", "user"}, {"content", "the last question"}});
  auto res = post("/api/chat", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_LE(j["prompt_eval_count"].get<int>() + 8, 256);
  EXPECT_GT(j["eval_count"].get<int>(), 0);
  json openai = {{"model", "fake"}, {"messages", body["messages"]}, {"max_tokens", 8}};
  res = post("/v1/chat/completions", openai);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "context_length_exceeded");
}

// options.num_ctx above --context grows the context up to the trained length, and
// /api/ps and /api/show report what is in force.
TEST_F(ServerTest, NumCtxGrowsTheContextAndIsReported) {
  start(FakeConfig{.n_ctx = 256, .max_ctx = 1024});
  const std::string long_prompt(400, 'x');  // 400+ tokens: does not fit 256
  json body = {{"model", "fake"},
               {"prompt", long_prompt},
               {"raw", true},
               {"stream", false},
               {"options", {{"num_predict", 4}}}};
  EXPECT_EQ(post("/api/generate", body)->status, 400);
  body["options"]["num_ctx"] = 600;
  auto res = post("/api/generate", body);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(client().Get("/api/ps")->body)["models"][0]["context_length"], 600);
  EXPECT_EQ(json::parse(post("/api/show", {{"model", "fake"}})->body)["parameters"], "num_ctx 600");
  body["options"]["num_ctx"] = 100000;  // capped at the trained length
  EXPECT_EQ(post("/api/generate", body)->status, 200);
  EXPECT_EQ(json::parse(client().Get("/api/ps")->body)["models"][0]["context_length"], 1024);
}

// keep_alive 0 unloads (done_reason "unload", /api/ps empty); the next request loads again.
TEST_F(ServerTest, KeepAliveZeroUnloads) {
  start();
  auto res = post("/api/generate", {{"model", "fake"}, {"keep_alive", 0}});
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["done_reason"], "unload");
  EXPECT_TRUE(json::parse(client().Get("/api/ps")->body)["models"].empty());
  res = post("/api/chat", chat_body(false));
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["done"], true);
  EXPECT_EQ(json::parse(client().Get("/api/ps")->body)["models"].size(), 1u);
  // With a prompt, it answers and then unloads.
  json body = chat_body(false);
  body["keep_alive"] = "0s";
  res = post("/api/chat", body);
  ASSERT_EQ(res->status, 200);
  EXPECT_FALSE(json::parse(res->body)["message"]["content"].get<std::string>().empty());
  EXPECT_TRUE(json::parse(client().Get("/api/ps")->body)["models"].empty());
  body["keep_alive"] = "5m";
  EXPECT_EQ(post("/api/chat", body)->status, 200);
  EXPECT_EQ(json::parse(client().Get("/api/ps")->body)["models"].size(), 1u);
}

// A host memory limit lowered below the plan (a container resized): while a request holds
// its cache, loading another slot is refused; once every slot is unloaded the next load
// plans again; where nothing fits, the refusal names the limit and the server runs on.
TEST_F(ServerTest, LoweredMemoryLimitReplansOnceEverySlotIsUnloaded) {
  auto memory = std::make_shared<FakeHostMemory>();
  auto gate = std::make_shared<GenerationGate>();
  ServerOptions options;
  options.parallel = 2;
  start(FakeConfig{.gate = gate, .memory = memory}, options);
  const auto generate = [&](const std::string& prompt, int keep_alive) {
    return post("/api/generate", {{"model", "fake"},
                                  {"prompt", prompt},
                                  {"stream", false},
                                  {"keep_alive", keep_alive},
                                  {"options", {{"num_predict", 2}}}});
  };
  ASSERT_EQ(post("/api/generate", {{"model", "fake"}, {"keep_alive", 0}})->status, 200);  // unload
  int held_status = 0;
  std::thread held([&] { held_status = generate("held", 300)->status; });
  ASSERT_TRUE(eventually([&] { return gate->waiting.load() == 1; }));
  memory->lowered = true;
  auto res = generate("other", 300);  // the idle slot has no session: it would load
  std::string error = json::parse(res->body).value("error", "");
  EXPECT_NE(error.find("memory limit is now"), std::string::npos) << error;
  EXPECT_NE(error.find("hold their caches"), std::string::npos) << error;
  EXPECT_EQ(memory->replans, 0);
  gate->open();
  held.join();
  ASSERT_EQ(held_status, 200);
  // The held request's slot still has its session: it answers, then unloads every slot.
  EXPECT_EQ(generate("held", 0)->status, 200);
  memory->fits = false;
  res = generate("next", 300);
  error = json::parse(res->body).value("error", "");
  EXPECT_NE(error.find("memory limit is now"), std::string::npos) << error;
  EXPECT_NE(error.find("planning again: no placement fits"), std::string::npos) << error;
  EXPECT_EQ(memory->replans, 1);
  memory->fits = true;
  EXPECT_TRUE(json::parse(generate("next", 300)->body).contains("response"));
  EXPECT_EQ(memory->replans, 2);
  EXPECT_FALSE(memory->lowered);
  EXPECT_TRUE(json::parse(generate("again", 300)->body).contains("response"));
  EXPECT_EQ(memory->replans, 2);
}

// curl -d sends application/x-www-form-urlencoded: read as JSON, up to --max-body.
TEST_F(ServerTest, FormContentTypeIsJson) {
  start(FakeConfig{.n_ctx = 100000});
  json body = {{"model", "fake"},
               {"prompt", std::string(20000, 'y')},
               {"raw", true},
               {"stream", false},
               {"options", {{"num_predict", 2}}}};
  auto res = client().Post("/api/generate", body.dump(), "application/x-www-form-urlencoded");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body.substr(0, 200);
  EXPECT_EQ(json::parse(res->body)["prompt_eval_count"], 20001);
}

// CORS as Ollama: allowed origins get Access-Control-Allow-Origin; OPTIONS is answered.
TEST_F(ServerTest, CorsForAllowedOrigins) {
  start();
  httplib::Request pre;
  pre.method = "OPTIONS";
  pre.path = "/api/chat";
  pre.set_header("Origin", "vscode-webview://abc");
  pre.set_header("Access-Control-Request-Method", "POST");
  pre.set_header("Access-Control-Request-Headers", "content-type, x-stainless-os");
  auto res = client().send(pre);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 204);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), "vscode-webview://abc");
  EXPECT_NE(res->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Headers"), "content-type, x-stainless-os");
  res = client().Post("/api/chat", {{"Origin", "http://localhost:3000"}}, chat_body(false).dump(),
                      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
  pre.headers.erase("Origin");
  pre.set_header("Origin", "https://evil.example");
  res = client().send(pre);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_FALSE(res->has_header("Access-Control-Allow-Origin"));
  res = client().Get("/api/tags");  // no Origin: no CORS headers
  EXPECT_FALSE(res->has_header("Access-Control-Allow-Origin"));
}

// Issue 18 item 4: the three embedding endpoints, batched inputs, truncate, dimensions.
TEST_F(ServerTest, Embeddings) {
  start(FakeConfig{.n_ctx = 64});
  auto res = post("/api/embed", {{"model", "fake"}, {"input", {"alpha", "beta", "alpha"}}});
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  ASSERT_EQ(j["embeddings"].size(), 3u);
  EXPECT_EQ(j["embeddings"][0], j["embeddings"][2]);  // same input, same vector
  EXPECT_NE(j["embeddings"][0], j["embeddings"][1]);
  double norm = 0;
  for (const json& x : j["embeddings"][1]) norm += x.get<double>() * x.get<double>();
  EXPECT_NEAR(norm, 1.0, 1e-5);
  EXPECT_EQ(j["prompt_eval_count"], 17);  // BOS + bytes: 6 + 5 + 6
  EXPECT_EQ(engine_->last_session->embeds.load(), 3);
  // The legacy endpoint and /v1 give the same vector.
  json legacy =
      json::parse(post("/api/embeddings", {{"model", "fake"}, {"prompt", "alpha"}})->body);
  EXPECT_EQ(legacy["embedding"], j["embeddings"][0]);
  json v1 = json::parse(post("/v1/embeddings", {{"model", "fake"}, {"input", "alpha"}})->body);
  EXPECT_EQ(v1["data"][0]["embedding"], j["embeddings"][0]);
  EXPECT_EQ(v1["usage"]["prompt_tokens"], 6);
  // Longer than the context: cut by default, an error with truncate false (and on /v1).
  const std::string long_text(100, 'z');
  res = post("/api/embed", {{"model", "fake"}, {"input", long_text}});
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["prompt_eval_count"], 64);
  EXPECT_EQ(
      post("/api/embed", {{"model", "fake"}, {"input", long_text}, {"truncate", false}})->status,
      400);
  EXPECT_EQ(post("/v1/embeddings", {{"model", "fake"}, {"input", long_text}})->status, 400);
  // dimensions keeps the first components, normalised again.
  json cut = json::parse(
      post("/api/embed", {{"model", "fake"}, {"input", "alpha"}, {"dimensions", 3}})->body);
  ASSERT_EQ(cut["embeddings"][0].size(), 3u);
  EXPECT_EQ(post("/api/embed", {{"model", "other"}, {"input", "a"}})->status, 404);
  // A chat after embeddings still works (the embedding replaced the cached prefix).
  EXPECT_EQ(post("/api/chat", chat_body(false))->status, 200);
}

// One request held running at the gate and a queue of one: of two more requests, one
// waits and the other is refused.
TEST_F(ServerTest, FullQueueGets503) {
  FakeConfig config;
  config.gate = std::make_shared<GenerationGate>();
  ServerOptions options;
  options.max_queue = 1;
  start(config, options);
  json body = {
      {"model", "fake"}, {"prompt", "p"}, {"stream", false}, {"options", {{"num_predict", 20}}}};
  std::atomic<int> ok{0}, busy{0};
  auto request = [&] {
    auto r = post("/api/generate", body);
    if (r && r->status == 200) ++ok;
    if (r && r->status == 503 &&
        json::parse(r->body)["error"].get<std::string>().find("busy") != std::string::npos) {
      ++busy;
    }
  };
  std::vector<std::thread> clients;
  clients.emplace_back(request);
  EXPECT_TRUE(eventually([&] { return config.gate->waiting.load() == 1; }));
  clients.emplace_back(request);
  clients.emplace_back(request);
  EXPECT_TRUE(eventually([&] { return busy.load() == 1; }));
  config.gate->open();
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(busy.load(), 1);
  EXPECT_EQ(post("/api/generate", body)->status, 200);  // room again
}

// The generation stops at the gate after five tokens and can only end by cancellation.
TEST_F(ServerTest, ClientDisconnectCancelsGeneration) {
  FakeConfig config;
  config.gate = std::make_shared<GenerationGate>();
  config.gate_at = 5;
  start(config);
  json body = {{"model", "fake"}, {"prompt", "p"}, {"options", {{"num_predict", 200}}}};
  int chunks = 0;
  auto res =
      post_streaming("/api/generate", body, [&](const char*, size_t) { return ++chunks < 3; });
  EXPECT_FALSE(res);  // we hung up
  ASSERT_TRUE(eventually([&] { return engine_->last_session->calls.load() == 1; }));
  EXPECT_TRUE(engine_->last_session->last_cancelled.load());
  EXPECT_LE(engine_->last_session->last_generated.load(), 5);
  config.gate->open();
  auto after = post("/api/chat", chat_body(false));
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);  // still serving
}

TEST_F(ServerTest, ClientGivingUpOnNonStreamedAnswerCancelsIt) {
  FakeConfig config;
  config.gate = std::make_shared<GenerationGate>();
  config.gate_at = 5;
  start(config);
  httplib::Client c = client();
  c.set_read_timeout(0, 200'000);  // gives up after 200 ms
  json body = {
      {"model", "fake"}, {"prompt", "p"}, {"stream", false}, {"options", {{"num_predict", 200}}}};
  EXPECT_FALSE(c.Post("/api/generate", body.dump(), "application/json"));
  ASSERT_TRUE(eventually([&] { return engine_->last_session->calls.load() == 1; }));
  EXPECT_TRUE(engine_->last_session->last_cancelled.load());
  EXPECT_LE(engine_->last_session->last_generated.load(), 5);
}

TEST_F(ServerTest, ShutdownEndsOpenStreamsWithAnError) {
  FakeConfig config;
  config.gate = std::make_shared<GenerationGate>();
  config.gate_at = 5;
  start(config);
  std::string received;
  std::thread streamer([&] {
    json body = {{"model", "fake"}, {"prompt", "p"}, {"options", {{"num_predict", 500}}}};
    post_streaming("/api/generate", body, [&](const char* data, size_t n) {
      received.append(data, n);
      return true;
    });
  });
  EXPECT_TRUE(eventually([&] { return config.gate->waiting.load() == 1; }));
  server_->shutdown();
  thread_.join();
  streamer.join();
  // The stream was cut, not finished (the gate never opens): its last line is the
  // shutdown error.
  auto lines = ndjson(received);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back()["error"], "server is shutting down");
  EXPECT_FALSE(client().Get("/"));  // no longer listening
}

}  // namespace
}  // namespace hypura::server

namespace hypura::server {
namespace {

// /api/pull against the loopback Hub: Ollama's NDJSON progress, the pulled model in
// /api/tags, /api/delete; errors as a line of the stream or with their HTTP status.
TEST_F(ServerTest, PullListAndDeleteModels) {
  store::testing::FakeHub hub;
  const std::string dir = ::testing::TempDir() + "/hypura-server-pull-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ServerOptions options;
  options.models_dir = dir;
  options.hf_endpoint = hub.endpoint();
  start({}, options);
  auto pulled = post("/api/pull", {{"model", "hf.co/org/repo"}});
  ASSERT_TRUE(pulled);
  EXPECT_EQ(pulled->status, 200);
  const std::vector<json> lines = ndjson(pulled->body);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines.front()["status"], "pulling manifest");
  EXPECT_EQ(lines.back()["status"], "success");
  bool progress = false;
  for (const json& l : lines) {
    if (l.contains("completed") && l["completed"] == l["total"] && l["total"] == 3 << 20) {
      progress = l["digest"] == "sha256:" + hub.shas_["m-Q4_K_M.gguf"];
    }
  }
  EXPECT_TRUE(progress) << pulled->body;
  const json tags = json::parse(client().Get("/api/tags")->body)["models"];
  ASSERT_EQ(tags.size(), 2u);
  EXPECT_EQ(tags[1]["name"], "hf.co/org/repo:Q4_K_M");
  EXPECT_EQ(tags[1]["size"], 3 << 20);
  // Not streamed; a missing repository; a bad name.
  auto quiet = post("/api/pull", {{"model", "hf.co/org/repo:Q8_0"}, {"stream", false}});
  EXPECT_EQ(quiet->status, 200);
  EXPECT_EQ(json::parse(quiet->body)["status"], "success");
  auto missing = post("/api/pull", {{"model", "hf.co/org/missing"}});
  EXPECT_EQ(
      ndjson(missing->body).back()["error"].get<std::string>().find("404") != std::string::npos,
      true);
  EXPECT_EQ(post("/api/pull", {{"model", "llama3"}, {"stream", false}})->status, 400);
  // Deleted once, then gone.
  httplib::Request del;
  del.method = "DELETE";
  del.path = "/api/delete";
  del.body = json{{"model", "hf.co/org/repo:Q4_K_M"}}.dump();
  del.set_header("Content-Type", "application/json");
  EXPECT_EQ(client().send(del)->status, 200);
  EXPECT_EQ(client().send(del)->status, 404);
  EXPECT_EQ(json::parse(client().Get("/api/tags")->body)["models"].size(), 2u);  // the Q8_0 stays
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hypura::server
