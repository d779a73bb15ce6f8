// Greedy answers of the real test models to a few factual prompts, checked in as
// tests/golden/expected_outputs.json after reading them (each must also contain the
// fact it is judged by, e.g. "Paris"). Skipped with a message when a model is absent.
//
// The exact text is recorded per SIMD path ("expected": {path: text}): paths round
// differently, and a small model at a near tie (gemma-3-270m, docs/FIDELITY.md) can
// continue differently after the fact. A path with no recorded text is checked for the
// fact alone. Regenerate the current path's texts after a deliberate numerical change
// with HYPURA_RECORD_EXPECTED=1 (read the diff before committing it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compute/compute.h"
#include "runtime/session.h"

namespace hypura::runtime {
namespace {

const std::string kSource = HYPURA_SOURCE_DIR;
const std::string kExpected = kSource + "/tests/golden/expected_outputs.json";

Result<std::string> greedy(Engine& engine, const nlohmann::json& c) {
  const std::string prompt = c["prompt"];
  std::vector<int32_t> tokens;
  if (c.value("chat", false)) {
    HYPURA_ASSIGN_OR_RETURN(tokens, engine.tokenize_chat({{"user", prompt}}, ChatOptions{}));
  } else {
    tokens = engine.tokenize(prompt, true);
  }
  GenerateOptions o;
  o.max_tokens = c.value("max_tokens", 12);
  o.sampling.temperature = 0;
  o.sampling.repeat_penalty = 1.0f;
  auto session = engine.new_session();
  HYPURA_ASSIGN_OR_RETURN(auto r, session->generate(tokens, o, nullptr));
  return r.text;
}

TEST(RealModels, FactualPromptsGreedy) {
  nlohmann::json cases;
  {
    std::ifstream in(kExpected);
    ASSERT_TRUE(in) << kExpected;
    cases = nlohmann::json::parse(in);
  }
  const bool record = std::getenv("HYPURA_RECORD_EXPECTED") != nullptr;
  int checked = 0;
  for (auto& m : cases["models"]) {
    const std::string path = kSource + "/test-models/" + m["file"].get<std::string>();
    if (!std::filesystem::exists(path)) {
      std::printf("skipping %s: absent (scripts/fetch-models.sh)\n", path.c_str());
      continue;
    }
    EngineOptions eo;
    eo.model_path = path;
    eo.n_ctx = 256;
    auto engine = Engine::load(eo);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    for (auto& c : m["cases"]) {
      auto text = greedy(**engine, c);
      ASSERT_TRUE(text.is_ok()) << text.status().message();
      std::printf("%s | %s -> %s\n", m["file"].get<std::string>().c_str(),
                  c["prompt"].get<std::string>().c_str(), text->c_str());
      const std::string path_name = compute::default_simd_name();
      if (record) c["expected"][path_name] = *text;
      if (c["expected"].contains(path_name)) {
        EXPECT_EQ(*text, c["expected"][path_name].get<std::string>()) << c["prompt"];
      } else {
        std::printf("  (no text recorded for %s: checking the fact only)\n", path_name.c_str());
      }
      EXPECT_NE(text->find(c["contains"].get<std::string>()), std::string::npos) << c["prompt"];
      ++checked;
    }
  }
  if (record) std::ofstream(kExpected) << cases.dump(2) << "\n";
  if (checked == 0) GTEST_SKIP() << "no real test model present (scripts/fetch-models.sh)";
}

// Issue 13's report: gemma-3-270m Q4_K_M greedy on this raw prompt printed
// <start_of_image> forever on AVX-512 and "\n\n<blockquote>The leaves..." elsewhere. No
// kernel is wrong (compute/matmul_test.cc checks every path against float64 and its
// scalar twin on these shapes and magnitudes): the exact F32 model itself is at a near
// tie here ("\n\n" 21.417 against <start_of_image> 21.266, 0.15 nats), and once
// <start_of_image> is emitted the exact model repeats it too. Which side a path lands on
// depends on its float summation order, which 8-bit activation rounding amplifies. This
// pins what must hold on every path: the same two candidates on top, each logit within
// 0.5 of the scalar path's (a corrupting kernel moves logits by whole units).
TEST(RealModels, GemmaHaikuNearTieSameCandidatesOnEveryPath) {
  const std::string path = kSource + "/test-models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (scripts/fetch-models.sh)";
  constexpr int32_t kNewlines = 108, kStartOfImage = 255999;
  std::vector<float> scalar;
  for (const char* level : {"scalar", "avx2", "avx512", "avx512vnni", "amx"}) {
    EngineOptions eo;
    eo.model_path = path;
    eo.n_ctx = 64;
    eo.simd = level;
    auto engine = Engine::load(eo);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    const auto tokens = (*engine)->tokenize("A haiku about autumn leaves:", true);
    std::vector<float> logits;
    ASSERT_TRUE((*engine)->new_session()->eval(tokens, &logits).is_ok());
    const int64_t n_vocab = (*engine)->n_vocab();
    std::vector<float> last(logits.end() - n_vocab, logits.end());
    std::vector<int32_t> order(static_cast<size_t>(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                      [&](int32_t a, int32_t b) { return last[a] > last[b]; });
    EXPECT_EQ(std::min(order[0], order[1]), kNewlines) << level;
    EXPECT_EQ(std::max(order[0], order[1]), kStartOfImage) << level;
    if (scalar.empty()) {
      scalar = last;
      continue;
    }
    for (int32_t id : {kNewlines, kStartOfImage}) {
      EXPECT_NEAR(last[id], scalar[id], 0.5) << level << " token " << id;
    }
  }
}

}  // namespace
}  // namespace hypura::runtime
