// Tokenizers against llama.cpp's expected ids (../shared/golden/tokenizer/, format in
// its README): encode(add_special = false, parse_special = false) must give exactly the
// recorded ids for every test string.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer.h"

namespace hypura::tokenizer {
namespace {

using testing_util::golden_dir;
using testing_util::read_file;

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// .inp: strings each followed by "\n__ggml_vocab_test__\n"; .out: one id list per line.
std::vector<Case> load_cases(const std::string& name) {
  const std::string inp = read_file(golden_dir() / ("ggml-vocab-" + name + ".gguf.inp"));
  const std::string out = read_file(golden_dir() / ("ggml-vocab-" + name + ".gguf.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t pos = 0, m; (m = inp.find(sep, pos)) != std::string::npos; pos = m + sep.size()) {
    cases.push_back({inp.substr(pos, m - pos), {}});
  }
  std::istringstream lines(out);
  std::string line;
  for (auto& c : cases) {
    if (!std::getline(lines, line)) break;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

void check_golden(const Tokenizer& tok, const std::string& name) {
  const auto cases = load_cases(name);
  ASSERT_GE(cases.size(), 30u) << name;
  int failures = 0;
  for (const auto& c : cases) {
    const auto got = tok.encode(c.text, false, false);
    EXPECT_EQ(got, c.ids) << name << ": text '" << c.text << "'";
    failures += got != c.ids;
  }
  EXPECT_EQ(failures, 0) << name << ": " << failures << " of " << cases.size() << " differ";
}

void check_vocab_file(const std::string& name) {
  const Tokenizer* tok = testing_util::golden_tokenizer(name);
  ASSERT_NE(tok, nullptr) << name;
  check_golden(*tok, name);
}

TEST(TokenizerGolden, LlamaSpm) { check_vocab_file("llama-spm"); }
TEST(TokenizerGolden, Phi3) { check_vocab_file("phi-3"); }
TEST(TokenizerGolden, Gpt2) { check_vocab_file("gpt-2"); }
TEST(TokenizerGolden, DeepseekLlm) { check_vocab_file("deepseek-llm"); }

void check_real_model(const std::string& name, std::initializer_list<std::string_view> kinds) {
  const Tokenizer* tok = testing_util::real_model_tokenizer(kinds);
  if (tok == nullptr) {
    GTEST_SKIP() << "no model with a " << name
                 << " tokenizer in test-models/ (run scripts/fetch-models.sh)";
  }
  check_golden(*tok, name);
}

TEST(TokenizerGolden, Qwen2WithRealVocab) { check_real_model("qwen2", {"gpt2/qwen2"}); }
TEST(TokenizerGolden, LlamaBpeWithRealVocab) {
  check_real_model("llama-bpe", {"gpt2/llama-bpe", "gpt2/llama3", "gpt2/llama-v3"});
}

// Speed guard, not a benchmark: a few KB must encode in milliseconds (no O(n^2)).
TEST(TokenizerGolden, EncodesLongTextFast) {
  for (const std::string name : {"llama-spm", "gpt-2"}) {
    const Tokenizer* tok = testing_util::golden_tokenizer(name);
    ASSERT_NE(tok, nullptr);
    std::string text;
    for (const auto& c : load_cases(name)) text += c.text;
    text += std::string(4096, 'a') + std::string(2048, ' ');  // long single words
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok->encode(text, true, false);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(ids.size(), 100u);
    EXPECT_LT(ms, 100.0) << name << ": " << text.size() << " bytes took " << ms << " ms";
    std::printf("[ perf ] %s: %zu bytes -> %zu tokens in %.2f ms\n", name.c_str(), text.size(),
                ids.size(), ms);
  }
}

}  // namespace
}  // namespace hypura::tokenizer
