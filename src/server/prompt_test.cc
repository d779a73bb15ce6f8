#include "server/prompt.h"

#include <gtest/gtest.h>

#include "server/testing/fake_engine.h"

namespace hypura::server {
namespace {

TEST(PromptTemplate, SubstitutesAndBranches) {
  TemplateVars vars{"sys", "hi", ""};
  auto out = render_prompt_template("{{ if .System }}[S]{{ .System }}[/S]{{ end }}[U]{{ .Prompt }}[A]", vars);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "[S]sys[/S][U]hi[A]");
  vars.system.clear();
  out = render_prompt_template("{{ if .System }}S{{ else }}none{{ end }}:{{ .Prompt }}", vars);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(*out, "none:hi");
}

TEST(PromptTemplate, TrimMarkersAndNesting) {
  TemplateVars vars{"s", "p", ""};
  auto out = render_prompt_template("a  {{- .Prompt -}}  b{{ if .Prompt }}{{ if .Response }}R{{ end }}x{{ end }}", vars);
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
  EXPECT_EQ(*tokenize_request(engine, req), *engine.tokenize_chat({{"system", "s"}, {"user", "ab"}}, true));
  req.prompt_template = "{{ .System }}|{{ .Prompt }}";
  EXPECT_EQ(*tokenize_request(engine, req), engine.tokenize("s|ab", true));
  req.api = Api::kOllamaChat;
  req.messages = {{"user", "q"}};
  EXPECT_EQ(*tokenize_request(engine, req), *engine.tokenize_chat(req.messages, true));
}

TEST(Prompt, OptionsCapTokensByContext) {
  GenerationRequest req;
  req.num_predict = -1;
  auto opts = generate_options(req, 100, 256, 7);
  ASSERT_TRUE(opts.is_ok());
  EXPECT_EQ(opts->max_tokens, 156);
  EXPECT_EQ(opts->sampling.seed, 7u);  // no seed given: the fresh one
  req.num_predict = 10;
  req.seed_given = true;
  req.sampling.seed = 3;
  req.sampling.repeat_last_n = -1;
  opts = generate_options(req, 100, 256, 7);
  EXPECT_EQ(opts->max_tokens, 10);
  EXPECT_EQ(opts->sampling.seed, 3u);
  EXPECT_EQ(opts->sampling.repeat_last_n, 256);
  req.num_ctx = 105;  // a smaller window for this request
  EXPECT_EQ(generate_options(req, 100, 256, 7)->max_tokens, 5);
  req.num_ctx = 100000;  // larger than the server's: capped
  EXPECT_EQ(request_context(req, 256), 256);
}

TEST(Prompt, PromptThatCannotFitIsAnError) {
  GenerationRequest req;
  auto opts = generate_options(req, 256, 256, 0);
  ASSERT_FALSE(opts.is_ok());
  EXPECT_EQ(opts.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(opts.status().message().find("256 tokens"), std::string::npos);
}

}  // namespace
}  // namespace hypura::server
