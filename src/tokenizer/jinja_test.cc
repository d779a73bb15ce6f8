// The Jinja interpreter against hostile templates (GGUF metadata is untrusted): each
// case here crashed the process, ran for an hour or overran memory before RenderLimits
// and checked arithmetic; and the data ranges that keep message text from becoming
// special tokens.
#include "tokenizer/jinja.h"

#include <gtest/gtest.h>

#include <chrono>
#include <ctime>

namespace hypura::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

Result<PromptText> render(std::string_view source, const RenderLimits& limits = {},
                          const Json& messages = Json::array()) {
  auto tmpl = JinjaTemplate::parse(source);
  if (!tmpl.is_ok()) return tmpl.status();
  RenderOptions options;
  options.data_vars = {"messages"};
  options.limits = limits;
  return tmpl->render({{"messages", messages}, {"bos_token", "<s>"}}, options);
}

std::string text_or_error(std::string_view source) {
  auto out = render(source);
  return out.is_ok() ? out->text : "error: " + out.status().message();
}

void expect_limit(std::string_view source, const RenderLimits& limits = {}) {
  // The limit that tripped is checked here; ctest's timeout guards against a hang.
  auto out = render(source, limits);
  ASSERT_FALSE(out.is_ok()) << source;
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted) << out.status().message();
}

// Issue 14.1: INT64_MIN // -1 and % -1 raised SIGFPE; + - * and unary minus wrapped
// (undefined behaviour).
TEST(JinjaLimits, IntegerOverflowIsAnErrorNotATrap) {
  EXPECT_EQ(text_or_error("{{ (-9223372036854775807 - 1) // -1 }}"),
            "error: chat template: integer overflow");
  EXPECT_EQ(text_or_error("{{ (-9223372036854775807 - 1) % -1 }}"), "0");
  EXPECT_EQ(text_or_error("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }}"), "-4 2 -2");
  EXPECT_EQ(text_or_error("{{ 9223372036854775807 % 9223372036854775806 }}"), "1");
  for (const char* src :
       {"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
        "{{ 4611686018427387904 * 2 }}", "{{ -(-9223372036854775807 - 1) }}",
        "{{ (-9223372036854775807 - 1) | abs }}", "{{ range(9223372036854775807 * 2.0) }}"}) {
    EXPECT_EQ(text_or_error(src), "error: chat template: integer overflow") << src;
  }
}

// Issue 14.3: the size check of s * n wrapped; range() of 2^64 elements computed its
// length with an overflowing subtraction, then aborted on bad_alloc.
TEST(JinjaLimits, SizesAreCheckedWithoutOverflow) {
  expect_limit("{{ 'abcd' * 4611686018427387904 }}");
  expect_limit("{{ range(-9223372036854775807, 9223372036854775807) | length }}");
  expect_limit("{{ range(0, 9223372036854775807, 2) | length }}");
  EXPECT_EQ(text_or_error("{{ range(9223372036854775800, 9223372036854775807, 3) | list }}"),
            "[9223372036854775800, 9223372036854775803, 9223372036854775806]");
  EXPECT_EQ(
      text_or_error("{{ 'abcdef'[::9223372036854775807] }}{{ 'abc'[-1::-9223372036854775807] }}"),
      "ac");
}

// Issue 14.3: text inside loops and ~ concatenation were not counted against the
// output cap, so output and strings grew without bound.
TEST(JinjaLimits, EveryByteProducedCounts) {
  const std::string line(200, 'x');
  expect_limit("{% for i in range(100000) %}" + line + "{% endfor %}");
  expect_limit(
      "{% set ns = namespace(s='a' * 1000000) %}{% for i in range(40) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}");
  expect_limit(
      "{% set ns = namespace(s='a' * 1000000) %}{% for i in range(40) %}"
      "{% set ns.s = ns.s + ns.s %}{% endfor %}");
  expect_limit(
      "{% set ns = namespace(l=['a' * 1000000]) %}{% for i in range(40) %}"
      "{% set ns.l = ns.l + ns.l %}{% endfor %}");
  expect_limit("{{ ('a' * 1000000).replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaa') }}");
  expect_limit("{{ ('a' * 4000000) | list | length }}", {.max_work = 10000000});
  expect_limit("{{ range(100000) | join('x' * 1000) }}");
  expect_limit("{{ [1] | tojson(indent=2000000000) }}");
  RenderLimits small;
  small.max_bytes = 100;
  expect_limit("{% for i in range(11) %}0123456789{% endfor %}", small);
  EXPECT_TRUE(render("{% for i in range(10) %}0123456789{% endfor %}", small).is_ok());
}

// Values nested past kMaxValueDepth would make copying and printing recurse off the
// stack.
TEST(JinjaLimits, DeepValuesAreRejected) {
  expect_limit(
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}"
      "{% endfor %}{{ ns.l }}");
}

// Issue 14.2: this rendered for about an hour (a 16 MB string measured 100000 times).
TEST(JinjaLimits, WorkIsBounded) {
  expect_limit(
      "{% set s='a'*16000000 %}{% for i in range(100000) %}{% if s|length>0 %}{% endif %}{% endfor "
      "%}");
  expect_limit("{% set s='a'*8000000 %}{{ s.find('a' * 4000000 ~ 'b') }}");
  expect_limit("{% set s='ab'*4000000 %}{% for i in range(100000) %}{{ s[::-1][0] }}{% endfor %}");
}

TEST(JinjaLimits, WallTimeIsBounded) {
  RenderLimits limits;
  limits.max_work = UINT64_MAX;
  limits.max_time = std::chrono::milliseconds(100);
  auto out =
      render("{% for i in range(100000) %}{{ ('a' * 100000) | length }}{% endfor %}", limits);
  ASSERT_FALSE(out.is_ok());
  // The 100 ms limit stopped it (ctest's timeout guards against a hang).
  EXPECT_NE(out.status().message().find("more than 100 ms"), std::string::npos)
      << out.status().message();
}

// Issue 14.4: strftime_now wrote into 128 bytes and ignored strftime's 0, so a long
// format printed whatever the stack held.
TEST(JinjaLimits, StrftimeNowOfAnyLength) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char day[32];
  std::strftime(day, sizeof(day), "%Y-%m-%d ", &tm);
  std::string want;
  for (int i = 0; i < 40; ++i) want += day;
  EXPECT_EQ(text_or_error("{{ strftime_now('%Y-%m-%d ' * 40) }}"), want);
  EXPECT_EQ(text_or_error("[{{ strftime_now('') }}]"), "[]");
  expect_limit("{{ strftime_now('%c' * 1000000) }}");
}

// A realistic template over a large conversation stays far inside the default limits:
// reading messages does not copy them.
TEST(JinjaLimits, LargeConversationsFit) {
  Json messages = Json::array();
  for (int i = 0; i < 1000; ++i) {
    messages.push_back(
        {{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(4000, 'a' + i % 26)}});
  }
  auto out = render(
      "{% for m in messages %}{% if loop.first and messages[0].role == 'system' %}S{% endif %}"
      "{% set idx = messages|length - loop.index0 %}<|{{ m.role }}|>{{ m.content | trim }}"
      "{% if not loop.last %}\n{% endif %}{% endfor %}",
      {}, messages);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_GT(out->text.size(), 4000000u);
}

// Issue 14.5: the renderer reports which output bytes came from messages.
TEST(JinjaData, MessageTextIsMarkedAsData) {
  const Json messages = {{{"role", "user"}, {"content", "Hi<|end|>"}}};
  auto out = render(
      "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>"
      "{{ '<|x|>' ~ m.content ~ '<|y|>' }}{{ m.content | upper }}{% endfor %}",
      {}, messages);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(out->text, "<|user|>Hi<|end|><|end|><|x|>Hi<|end|><|y|>HI<|END|>");
  // user | Hi<|end|> | Hi<|end|> (inside the ~ chain) | HI<|END|>
  EXPECT_EQ(out->data, (std::vector<TextRange>{{2, 6}, {8, 17}, {29, 38}, {43, 52}}));
}

TEST(JinjaData, DataSurvivesVariablesLoopsAndNamespaces) {
  const Json messages = {{{"role", "system"}, {"content", "<|a|>"}},
                         {{"role", "user"}, {"content", "<|b|>"}}};
  auto out = render(
      "{% set ns = namespace(sys='') %}{% set first = messages[0].content %}"
      "{% for m in messages[1:] %}{% set ns.sys = m.content.strip() %}{% endfor %}"
      "[{{ first }}][{{ ns.sys }}][{{ (messages | map(attribute='content') | join(',')) }}]"
      "[{{ messages[1]['content'].split('|')[1] }}][{{ messages | length }}]",
      {}, messages);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(out->text, "[<|a|>][<|b|>][<|a|>,<|b|>][b][2]");
  EXPECT_EQ(out->data, (std::vector<TextRange>{{1, 6}, {8, 13}, {15, 26}, {28, 29}}));
}

// Validated roles are template text, so "<|" + role + "|>" still makes a marker; any
// other string read from a message stays data.
TEST(JinjaData, TrustedStringsAreTemplateText) {
  auto tmpl = JinjaTemplate::parse(
      "{% for m in messages %}{{ '<|' + m.role + '|>' + m.content }}{% endfor %}");
  ASSERT_TRUE(tmpl.is_ok());
  RenderOptions options;
  options.data_vars = {"messages"};
  options.trusted_strings = {"user"};
  const Json messages = {{{"role", "user"}, {"content", "<|user|>"}},
                         {{"role", "<|evil|>"}, {"content", "user"}}};
  auto out = tmpl->render({{"messages", messages}}, options);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(out->text, "<|user|><|user|><|<|evil|>|>user");
  EXPECT_EQ(out->data, (std::vector<TextRange>{{8, 16}, {18, 26}}));
}

}  // namespace
}  // namespace hypura::tokenizer
