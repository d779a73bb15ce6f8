#include "server/tool_calls.h"

#include <gtest/gtest.h>

namespace hypura::server {
namespace {

// Feeds `reply` in pieces of `step` bytes; returns the text and calls it came out as.
ToolCallParser::Output run(const std::string& reply, size_t step,
                           std::vector<OfferedTool> tools = {{"get_weather", nullptr},
                                                             {"f", nullptr}}) {
  ToolCallParser p(std::move(tools));
  ToolCallParser::Output all;
  const auto add = [&](ToolCallParser::Output o, bool last) {
    // Until the end, returned text never stops inside what could be an opening tag.
    const std::string tag = "<tool_call>";
    for (size_t n = 1; !last && n < tag.size(); ++n) {
      EXPECT_FALSE(o.text.ends_with(tag.substr(0, n))) << o.text;
    }
    all.text += o.text;
    for (auto& c : o.calls) all.calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < reply.size(); i += step) add(p.push(reply.substr(i, step)), false);
  add(p.finish(), true);
  return all;
}

TEST(ToolCalls, QwenFormatAtAnyPieceBoundary) {
  const std::string reply =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": "
      "\\\"CET\\\"}\"}\n</tool_call>";
  for (size_t step : {1, 2, 3, 7, 1000}) {
    ToolCallParser::Output out = run(reply, step);
    EXPECT_EQ(out.text, "Let me check.\n\n") << step;
    ASSERT_EQ(out.calls.size(), 2u) << step;
    EXPECT_EQ(out.calls[0].name, "get_weather");
    EXPECT_EQ(out.calls[0].arguments, nlohmann::json({{"city", "Paris"}}));
    EXPECT_EQ(out.calls[1].name, "get_time");
    EXPECT_EQ(out.calls[1].arguments, nlohmann::json({{"tz", "CET"}}));  // a JSON string, unwrapped
  }
}

TEST(ToolCalls, PlainTextAndLookalikesPassThrough) {
  EXPECT_EQ(run("a < b and <tool but no call", 1).text, "a < b and <tool but no call");
  EXPECT_TRUE(run("no calls here", 4).calls.empty());
  // A tag whose body is not a call object stays text, tags included.
  ToolCallParser::Output out = run("x<tool_call>not json</tool_call>y", 3);
  EXPECT_EQ(out.text, "x<tool_call>not json</tool_call>y");
  EXPECT_TRUE(out.calls.empty());
  out = run("<tool_call>{\"arguments\": {}}</tool_call>", 5);  // no name
  EXPECT_TRUE(out.calls.empty());
}

TEST(ToolCalls, UnclosedCallAtTheEnd) {
  // Models often stop with EOS right after the object.
  ToolCallParser::Output out =
      run("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1}}\n", 4);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "f");
  EXPECT_EQ(out.text, "");
  out = run("<tool_call>{\"name\": \"f\", \"argu", 4);  // cut mid-object: text
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.text, "<tool_call>{\"name\": \"f\", \"argu");
}

TEST(ToolCalls, BareJsonCallsOfOfferedTools) {
  for (size_t step : {1, 5, 1000}) {
    ToolCallParser::Output out =
        run(" {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", step);
    EXPECT_EQ(out.text, "") << step;
    ASSERT_EQ(out.calls.size(), 1u);
    EXPECT_EQ(out.calls[0].arguments["city"], "Paris");
  }
  ToolCallParser::Output out =
      run(R"([{"name": "f", "arguments": {}}, {"name": "get_weather"}])", 3);
  EXPECT_EQ(out.calls.size(), 2u);
  // A JSON answer that is not a call of an offered tool stays text, whole.
  for (const std::string text :
       {R"({"name": "other", "arguments": {}})", R"({"answer": 42})", "{not json"}) {
    out = run(text, 2);
    EXPECT_TRUE(out.calls.empty()) << text;
    EXPECT_EQ(out.text, text);
  }
}

// Qwen2.5-Coder-0.5B writes its call in a Markdown code block; a code block that is not a
// call streams as it comes.
TEST(ToolCalls, FencedBareCalls) {
  const std::string fenced =
      "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```";
  for (size_t step : {1, 2, 4, 1000}) {
    ToolCallParser::Output out = run(fenced, step);
    EXPECT_EQ(out.text, "") << step;
    ASSERT_EQ(out.calls.size(), 1u) << step;
    EXPECT_EQ(out.calls[0].name, "get_weather");
  }
  ToolCallParser p({{"f", nullptr}});
  EXPECT_EQ(p.push("```python\nprint(1)\n").text, "```python\nprint(1)\n");  // not held back
  EXPECT_EQ(p.finish().text, "");
}

// A bare call counts only when its arguments validate against the tool's schema.
TEST(ToolCalls, BareCallsValidateTheirArguments) {
  const auto schema = grammar::compile_json_schema(nlohmann::json::parse(
      R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})"));
  ASSERT_TRUE(schema.is_ok());
  const std::vector<OfferedTool> tools = {{"get_weather", schema.value()}};
  EXPECT_EQ(
      run(R"({"name": "get_weather", "arguments": {"city": "Paris"}})", 3, tools).calls.size(), 1u);
  for (const std::string text : {R"({"name": "get_weather", "arguments": {"city": 7}})",
                                 R"({"name": "get_weather", "arguments": {}})"}) {
    ToolCallParser::Output out = run(text, 3, tools);
    EXPECT_TRUE(out.calls.empty()) << text;
    EXPECT_EQ(out.text, text);
  }
  // offered_tools compiles each tool's parameters from the request's JSON.
  const std::vector<OfferedTool> parsed = offered_tools(
      R"([{"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}},
          {"type": "function", "function": {"name": "h"}}])");
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_EQ(parsed[0].name, "g");
  EXPECT_NE(parsed[0].parameters, nullptr);
  EXPECT_EQ(parsed[1].parameters, nullptr);
}

}  // namespace
}  // namespace hypura::server
