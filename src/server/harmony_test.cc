#include "server/harmony.h"

#include <gtest/gtest.h>

namespace hypura::server {
namespace {

// Feeds `reply` in pieces of `step` bytes; returns what it came out as.
ReplyPieces run(const std::string& reply, size_t step) {
  HarmonyParser p;
  ReplyPieces all;
  const auto add = [&](ReplyPieces o) {
    for (const char* marker : {"<|channel|>", "<|message|>", "<|end|>", "<|start|>"}) {
      EXPECT_EQ(o.text.find(marker), std::string::npos) << "markup in the content: " << o.text;
      EXPECT_EQ(o.thinking.find(marker), std::string::npos) << "markup in the reasoning";
    }
    all.text += o.text;
    all.thinking += o.thinking;
    for (auto& c : o.calls) all.calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < reply.size(); i += step) add(p.push(reply.substr(i, step)));
  add(p.finish());
  return all;
}

constexpr size_t kSteps[] = {1, 2, 3, 5, 11, 1000};

TEST(Harmony, ReasoningThenAnswerAtAnyPieceBoundary) {
  const std::string reply =
      "<|channel|>analysis<|message|>User greets. Reply briefly.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?";
  for (size_t step : kSteps) {
    ReplyPieces out = run(reply, step);
    EXPECT_EQ(out.thinking, "User greets. Reply briefly.") << step;
    EXPECT_EQ(out.text, "Hello! How can I help?") << step;
    EXPECT_TRUE(out.calls.empty());
  }
}

TEST(Harmony, FunctionCallsWithTheRecipientInEitherPlace) {
  const std::string after_channel =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 2}";
  const std::string before_channel =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant "
      "to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\", "
      "\"days\": 2}";
  for (const std::string& reply : {after_channel, before_channel}) {
    for (size_t step : kSteps) {
      ReplyPieces out = run(reply, step);
      EXPECT_EQ(out.thinking, "Need weather.") << step;
      EXPECT_EQ(out.text, "") << step;
      ASSERT_EQ(out.calls.size(), 1u) << step;
      EXPECT_EQ(out.calls[0].name, "get_weather");
      EXPECT_EQ(out.calls[0].arguments, nlohmann::json({{"city", "Paris"}, {"days", 2}}));
    }
  }
}

TEST(Harmony, ArgumentsThatAreNotAnObjectPassAsWritten) {
  ReplyPieces out = run("<|channel|>commentary to=functions.f<|message|>{\"x\": ", 4);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "f");
  EXPECT_EQ(out.calls[0].arguments, nlohmann::json("{\"x\": "));
}

TEST(Harmony, PreamblesAreContentAndBuiltInToolsAreReasoning) {
  ReplyPieces out =
      run("<|channel|>commentary<|message|>Checking now.<|end|>"
          "<|start|>assistant<|channel|>analysis to=browser.search<|message|>{\"q\": 1}<|end|>"
          "<|start|>assistant<|channel|>final<|message|>Done.",
          3);
  EXPECT_EQ(out.text, "Checking now.Done.");
  EXPECT_EQ(out.thinking, "{\"q\": 1}");
  EXPECT_TRUE(out.calls.empty());
}

TEST(Harmony, ReplyWithoutMarkupIsContent) {
  for (size_t step : kSteps) {
    EXPECT_EQ(run("  Plain answer, a < b and <| not a marker.", step).text,
              "  Plain answer, a < b and <| not a marker.")
        << step;
  }
}

TEST(Harmony, LookalikesInsideABodyPassThrough) {
  ReplyPieces out = run("<|channel|>final<|message|>a <|en b <| c <|channel d", 2);
  EXPECT_EQ(out.text, "a <|en b <| c <|channel d");
}

TEST(Harmony, AHeaderCutShortIsDropped) {
  ReplyPieces out =
      run("<|channel|>analysis<|message|>thinking<|end|><|start|>assistant<|channel|>fin", 1);
  EXPECT_EQ(out.thinking, "thinking");
  EXPECT_EQ(out.text, "");
}

}  // namespace
}  // namespace hypura::server
