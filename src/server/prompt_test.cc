#include "server/prompt.h"

#include <gtest/gtest.h>

#include "server/testing/fake_engine.h"

namespace hypura::server {
namespace {

TEST(PromptTemplate, SubstitutesAndBranches) {
  TemplateVars vars{"sys", "hi", ""};
  auto out = render_prompt_template(
      "{{ if .System }}[S]{{ .System }}[/S]{{ end }}[U]{{ .Prompt }}[A]", vars);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "[S]sys[/S][U]hi[A]");
  vars.system.clear();
  out = render_prompt_template("{{ if .System }}S{{ else }}none{{ end }}:{{ .Prompt }}", vars);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(*out, "none:hi");
}

TEST(PromptTemplate, TrimMarkersAndNesting) {
  TemplateVars vars{"s", "p", ""};
  auto out = render_prompt_template(
      "a  {{- .Prompt -}}  b{{ if .Prompt }}{{ if .Response }}R{{ end }}x{{ end }}", vars);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(*out, "apbx");
}

TEST(PromptTemplate, ErrorsNameTheAction) {
  TemplateVars vars;
  auto out = render_prompt_template("{{ range .Messages }}x{{ end }}", vars);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("range .Messages"), std::string::npos);
  EXPECT_FALSE(render_prompt_template("{{ if .Prompt }}x", vars).is_ok());
  EXPECT_FALSE(render_prompt_template("{{ end }}", vars).is_ok());
  EXPECT_FALSE(render_prompt_template("{{ .Prompt", vars).is_ok());
}

TEST(Prompt, TokenizesEachApi) {
  testing::FakeEngine engine;
  GenerationRequest req;
  req.api = Api::kOllamaGenerate;
  req.prompt = "ab";
  req.raw = true;
  EXPECT_EQ(*tokenize_request(engine, req), engine.tokenize("ab", true));
  req.raw = false;
  req.system = "s";
  EXPECT_EQ(*tokenize_request(engine, req),
            *engine.tokenize_chat({{"system", "s"}, {"user", "ab"}}, {}));
  req.prompt_template = "{{ .System }}|{{ .Prompt }}";
  EXPECT_EQ(*tokenize_request(engine, req), engine.tokenize("s|ab", true));
  req.api = Api::kOllamaChat;
  req.messages = {{"user", "q"}};
  EXPECT_EQ(*tokenize_request(engine, req), *engine.tokenize_chat(req.messages, {}));
}

TEST(Prompt, OptionsCapTokensByContext) {
  testing::FakeEngine engine(testing::FakeConfig{.n_ctx = 256, .max_ctx = 1000});
  GenerationRequest req;
  req.num_predict = -1;
  auto opts = generate_options(req, 100, 256, 7);
  ASSERT_TRUE(opts.is_ok());
  EXPECT_EQ(opts->max_tokens, 156);
  EXPECT_EQ(opts->sampling.seed, 7u);       // no seed given: the fresh one
  EXPECT_TRUE(opts->drop_unfinished_char);  // streams never end in U+FFFD
  req.num_predict = 10;
  req.seed_given = true;
  req.sampling.seed = 3;
  req.sampling.repeat_last_n = -1;
  opts = generate_options(req, 100, 256, 7);
  EXPECT_EQ(opts->max_tokens, 10);
  EXPECT_EQ(opts->sampling.seed, 3u);
  EXPECT_EQ(opts->sampling.repeat_last_n, 256);
  EXPECT_EQ(request_context(req, engine), 256);  // no num_ctx: --context
  req.num_ctx = 105;                             // a smaller window for this request
  EXPECT_EQ(generate_options(req, 100, request_context(req, engine), 7)->max_tokens, 5);
  req.num_ctx = 600;  // larger than --context: grows, up to the trained length
  EXPECT_EQ(request_context(req, engine), 600);
  req.num_ctx = 100000;
  EXPECT_EQ(request_context(req, engine), 1000);
}

TEST(Prompt, PromptThatCannotFitIsAnError) {
  GenerationRequest req;
  auto opts = generate_options(req, 256, 256, 0);
  ASSERT_FALSE(opts.is_ok());
  EXPECT_EQ(opts.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(opts.status().message().find("256 tokens"), std::string::npos);
}

// A conversation of `turns` user/assistant pairs of 20-byte messages after a system one.
std::vector<runtime::ChatMessage> long_chat(int turns) {
  std::vector<runtime::ChatMessage> m = {{"system", "be brief"}};
  for (int i = 0; i < turns; ++i) {
    m.push_back({"user", "question number " + std::to_string(100 + i)});
    m.push_back({"assistant", "answer number " + std::to_string(100 + i) + "!!"});
  }
  m.push_back({"user", "last question"});
  return m;
}

TEST(Prompt, LongChatDropsOldestTurnsKeepingSystem) {
  testing::FakeEngine engine(testing::FakeConfig{.n_ctx = 256});
  GenerationRequest req;
  req.api = Api::kOllamaChat;
  req.num_predict = 16;
  req.messages = long_chat(20);  // ~30 tokens a turn (bytes): far more than 256
  bool too_long = true;
  auto p = prepare_prompt(engine, req, &too_long);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_FALSE(too_long);
  EXPECT_LE(static_cast<int64_t>(p->tokens.size()) + 16, 256);
  ASSERT_GT(p->dropped_messages, 0u);
  EXPECT_EQ(p->dropped_messages % 2, 0u);  // whole turns: the tail starts at a user message
  // It is exactly the longest tail that fits: the system message, then messages from
  // the first kept user turn on.
  std::vector<runtime::ChatMessage> kept = {req.messages[0]};
  kept.insert(kept.end(),
              req.messages.begin() + 1 + static_cast<std::ptrdiff_t>(p->dropped_messages),
              req.messages.end());
  EXPECT_EQ(p->tokens, *engine.tokenize_chat(kept, {}));
  std::vector<runtime::ChatMessage> one_more = {req.messages[0]};
  one_more.insert(one_more.end(),
                  req.messages.begin() + static_cast<std::ptrdiff_t>(p->dropped_messages) - 1,
                  req.messages.end());  // from the user turn before the first kept one
  EXPECT_GT(engine.tokenize_chat(one_more, {})->size() + 16, 256u);

  // OpenAI's dialect answers context_length_exceeded instead.
  req.api = Api::kOpenAiChat;
  p = prepare_prompt(engine, req, &too_long);
  EXPECT_FALSE(p.is_ok());
  EXPECT_TRUE(too_long);
  // A short chat is untouched.
  req.api = Api::kOllamaChat;
  req.messages = long_chat(1);
  p = prepare_prompt(engine, req, &too_long);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->dropped_messages, 0u);
  EXPECT_EQ(p->tokens, *engine.tokenize_chat(req.messages, {}));
  // A last message that cannot fit at all is an error naming the window.
  req.messages = {{"system", "s"}, {"user", std::string(300, 'x')}};
  p = prepare_prompt(engine, req, &too_long);
  EXPECT_FALSE(p.is_ok());
  EXPECT_TRUE(too_long);
  EXPECT_NE(p.status().message().find("256"), std::string::npos);
}

TEST(Prompt, AssistantLastMessageIsContinued) {
  testing::FakeEngine engine;
  GenerationRequest req;
  req.api = Api::kOllamaChat;
  req.messages = {{"user", "q"}, {"assistant", "The answer is"}};
  bool too_long = false;
  auto p = prepare_prompt(engine, req, &too_long);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->tokens, engine.tokenize("<|user|>q\n<|assistant|>The answer is", true));
}

TEST(Prompt, SuffixIsFillInTheMiddle) {
  testing::FakeEngine engine;
  GenerationRequest req;
  req.api = Api::kOllamaGenerate;
  req.prompt = "def f(";
  req.suffix = "):";
  std::vector<int32_t> want = engine.tokenize("", true);
  want.push_back(testing::FakeEngine::kFimPrefix);
  for (int32_t t : engine.tokenize("def f(", false)) want.push_back(t);
  want.push_back(testing::FakeEngine::kFimSuffix);
  for (int32_t t : engine.tokenize("):", false)) want.push_back(t);
  want.push_back(testing::FakeEngine::kFimMiddle);
  EXPECT_EQ(*tokenize_request(engine, req), want);
  req.api = Api::kOpenAiCompletion;
  req.raw = true;
  EXPECT_EQ(*tokenize_request(engine, req), want);
}

}  // namespace
}  // namespace hypura::server
