// Greedy answers of the real test models to a few factual prompts, checked in as
// tests/golden/expected_outputs.json after reading them (each must also contain the
// fact it is judged by, e.g. "Paris"). Skipped with a message when a model is absent.
//
// Regenerate after a deliberate numerical change with HYPURA_RECORD_EXPECTED=1 (it
// rewrites the "expected" fields; read the diff before committing it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/session.h"

namespace hypura::runtime {
namespace {

const std::string kSource = HYPURA_SOURCE_DIR;
const std::string kExpected = kSource + "/tests/golden/expected_outputs.json";

Result<std::string> greedy(Engine& engine, const nlohmann::json& c) {
  const std::string prompt = c["prompt"];
  std::vector<int32_t> tokens;
  if (c.value("chat", false)) {
    HYPURA_ASSIGN_OR_RETURN(tokens, engine.tokenize_chat({{"user", prompt}}, true));
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
      if (record) c["expected"] = *text;
      EXPECT_EQ(*text, c["expected"].get<std::string>()) << c["prompt"];
      EXPECT_NE(text->find(c["contains"].get<std::string>()), std::string::npos) << c["prompt"];
      ++checked;
    }
  }
  if (record) std::ofstream(kExpected) << cases.dump(2) << "\n";
  if (checked == 0) GTEST_SKIP() << "no real test model present (scripts/fetch-models.sh)";
}

}  // namespace
}  // namespace hypura::runtime
