// Sampler, stop strings and the Engine/Session contract on a golden model.
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace hypura::runtime {
namespace {

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 1.0f;
  Sampler s(p, 5);
  float logits[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  EXPECT_EQ(s.sample(logits, {}), 1);
}

// Against the rule itself (the first id whose logit beats every earlier one) on long rows
// with ties, -inf, NaNs and a NaN in front, at lengths around the 16-wide passes.
TEST(Sampler, ArgmaxIsTheFirstStrictlyLargest) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> pick(0, 40);
  for (int64_t n : {1, 15, 16, 17, 1000, 128256}) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<float> row(static_cast<size_t>(n));
      for (float& v : row) v = static_cast<float>(pick(rng)) / 4;  // many ties
      if (variant >= 1) {
        for (int64_t i = 0; i < n; i += 7) row[i] = -std::numeric_limits<float>::infinity();
        for (int64_t i = 3; i < n; i += 11) row[i] = std::numeric_limits<float>::quiet_NaN();
      }
      if (variant == 2) row[0] = std::numeric_limits<float>::quiet_NaN();
      int64_t want = 0;
      for (int64_t i = 1; i < n; ++i) {
        if (row[i] > row[want]) want = i;
      }
      EXPECT_EQ(Sampler::argmax(row.data(), n), want) << n << " " << variant;
    }
  }
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 42;
  std::vector<int32_t> a, b;
  for (auto* out : {&a, &b}) {
    Sampler s(p, 8);
    for (int i = 0; i < 50; ++i) {
      float logits[8] = {0, 0.5f, 1, 0.2f, 0.1f, 0.9f, 0.3f, 0.4f};
      out->push_back(s.sample(logits, {}));
    }
  }
  EXPECT_EQ(a, b);
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 2u);  // it does sample
}

TEST(Sampler, TruncationKeepsOnlyAllowedTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.repeat_penalty = 1.0f;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.top_k = 2;
  Sampler s(p, 4);
  for (int i = 0; i < 100; ++i) {
    float logits[4] = {1.0f, 3.0f, 2.9f, 0.0f};
    const int32_t id = s.sample(logits, {});
    EXPECT_TRUE(id == 1 || id == 2) << id;
  }
  p.top_k = 0;
  p.min_p = 0.5f;  // keeps tokens with p >= 0.5 * p_max: ids 1 and 2 only
  Sampler m(p, 4);
  for (int i = 0; i < 100; ++i) {
    float logits[4] = {1.0f, 3.0f, 2.9f, 0.0f};
    const int32_t id = m.sample(logits, {});
    EXPECT_TRUE(id == 1 || id == 2) << id;
  }
}

TEST(Sampler, RepetitionPenaltyDemotesRecentTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 2.0f;
  Sampler s(p, 3);
  float logits[3] = {1.0f, 1.5f, -1.0f};
  const int32_t history[] = {1, 1};
  EXPECT_EQ(s.sample(logits, history), 0);  // 1.5 / 2 < 1.0
  EXPECT_FLOAT_EQ(logits[1], 0.75f);        // penalised once, not per occurrence
}

TEST(StopMatcher, HoldsBackPossibleStartsAndCutsAtTheStop) {
  std::vector<std::string> stops = {"</end>", "STOP"};
  StopMatcher m(stops);
  bool stopped = false;
  EXPECT_EQ(m.push("Hello <", &stopped), "Hello ");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.push("/e", &stopped), "");
  EXPECT_EQ(m.push("x> ok ST", &stopped), "</ex> ok ");
  EXPECT_EQ(m.push("OP and more", &stopped), "");
  EXPECT_TRUE(stopped);
  StopMatcher n(stops);
  EXPECT_EQ(n.push("abc S", &stopped), "abc ");
  EXPECT_EQ(n.flush(), "S");
}

std::unique_ptr<Engine> golden_engine(bool kv_f32 = true) {
  EngineOptions o;
  o.model_path = std::string(HYPURA_GOLDEN_DIR) + "/llama-f32.gguf";
  o.n_threads = 2;
  o.kv_f32 = kv_f32;
  auto e = Engine::load(o);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

const std::vector<int32_t> kB = {1, 263, 278, 310, 322, 338, 363, 373, 376, 29, 100, 13, 300};

TEST(Engine, LoadsGoldenModelAndCapsContext) {
  auto e = golden_engine();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->architecture(), "llama");
  EXPECT_EQ(e->n_vocab(), 384);
  EXPECT_EQ(e->n_ctx(), 512);  // 4096 requested, trained length 512
  EXPECT_EQ(e->mode(), "full-resident");
}

TEST(Engine, UnknownFileGivesAClearError) {
  EngineOptions o;
  o.model_path = "/nonexistent/model.gguf";
  auto e = Engine::load(o);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("/nonexistent/model.gguf"), std::string::npos);
}

TEST(Session, EvalMatchesGoldenAndIsSplitInvariant) {
  auto e = golden_engine();
  ASSERT_TRUE(e);
  auto s = e->new_session();
  std::vector<float> all, first, second;
  ASSERT_TRUE(s->eval(kB, &all).is_ok());
  EXPECT_EQ(s->n_past(), 13);
  s->reset();
  ASSERT_TRUE(s->eval({kB.begin(), kB.begin() + 5}, &first).is_ok());
  ASSERT_TRUE(s->eval({kB.begin() + 5, kB.end()}, &second).is_ok());
  first.insert(first.end(), second.begin(), second.end());
  ASSERT_EQ(first.size(), all.size());
  EXPECT_EQ(0, std::memcmp(first.data(), all.data(), all.size() * 4));
  std::ifstream in(std::string(HYPURA_GOLDEN_DIR) + "/llama-f32.B.kvf32_fa_off.logits.f32",
                   std::ios::binary);
  std::vector<float> want(all.size());
  in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
  double max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i)
    max_abs = std::max<double>(max_abs, std::abs(all[i] - want[i]));
  EXPECT_LE(max_abs, 2e-4);
}

TEST(Session, TruncateKeepsThePrefixAndContinuesAfterIt) {
  auto e = golden_engine();
  ASSERT_TRUE(e);
  auto s = e->new_session();
  std::vector<float> all, again;
  ASSERT_TRUE(s->eval(kB, &all).is_ok());
  s->truncate(5);
  EXPECT_EQ(s->n_past(), 5);
  ASSERT_TRUE(s->eval({kB.begin() + 5, kB.end()}, &again).is_ok());
  const size_t n_vocab = static_cast<size_t>(e->n_vocab());
  ASSERT_EQ(again.size(), all.size() - 5 * n_vocab);
  // The same positions over the same cached prefix: the same logits, bit for bit.
  EXPECT_EQ(0, std::memcmp(again.data(), all.data() + 5 * n_vocab, again.size() * 4));
  s->truncate(100);  // longer than the cache: nothing changes
  EXPECT_EQ(s->n_past(), 13);
}

TEST(Session, GenerateReusesThePrefixAndIsDeterministic) {
  auto e = golden_engine(false);
  ASSERT_TRUE(e);
  auto s = e->new_session();
  GenerateOptions o;
  o.max_tokens = 8;
  o.sampling.temperature = 0;
  std::string streamed;
  auto r1 = s->generate(kB, o, [&](std::string_view p) {
    streamed += p;
    return true;
  });
  ASSERT_TRUE(r1.is_ok()) << r1.status().message();
  EXPECT_EQ(r1->prompt_tokens, 13);
  EXPECT_EQ(r1->prompt_tokens_reused, 0);
  EXPECT_EQ(r1->generated_tokens, 8);
  EXPECT_EQ(r1->done_reason, "length");
  EXPECT_EQ(streamed, r1->text);
  // Same prompt again: all but the last prompt token come from the cache, same output.
  auto r2 = s->generate(kB, o, nullptr);
  ASSERT_TRUE(r2.is_ok());
  EXPECT_EQ(r2->prompt_tokens_reused, 12);
  EXPECT_EQ(r2->text, r1->text);
  // A fresh session gives the same text (prefix reuse changes nothing numerically).
  auto fresh = e->new_session();
  auto r3 = fresh->generate(kB, o, nullptr);
  ASSERT_TRUE(r3.is_ok());
  EXPECT_EQ(r3->text, r1->text);
}

TEST(Session, OverflowIsRefusedBeforeWork) {
  auto e = golden_engine();
  ASSERT_TRUE(e);
  auto s = e->new_session();
  GenerateOptions o;
  o.max_tokens = 500;  // 13 + 500 > 512
  auto r = s->generate(kB, o, nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s->n_past(), 0);
}

TEST(Session, CancelStopsGeneration) {
  auto e = golden_engine();
  ASSERT_TRUE(e);
  auto s = e->new_session();
  GenerateOptions o;
  o.max_tokens = 50;
  int pieces = 0;
  auto r = s->generate(kB, o, [&](std::string_view) { return ++pieces < 3; });
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->done_reason, "cancelled");
  EXPECT_LT(r->generated_tokens, 50);
}

}  // namespace
}  // namespace hypura::runtime
