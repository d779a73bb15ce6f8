// Tokenizers against llama.cpp's expected ids (../shared/golden/tokenizer/, format in
// its README): encode(add_special = false, parse_special = false) must give exactly the
// recorded ids for every test string.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "tokenizer/testing/test_util.h"
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
std::vector<Case> load_cases(const std::filesystem::path& inp_path,
                             const std::filesystem::path& out_path) {
  const std::string inp = read_file(inp_path);
  const std::string out = read_file(out_path);
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

std::vector<Case> load_cases(const std::string& name,
                             const std::filesystem::path& dir = golden_dir()) {
  return load_cases(dir / ("ggml-vocab-" + name + ".gguf.inp"),
                    dir / ("ggml-vocab-" + name + ".gguf.out"));
}

// `special`: add BOS/EOS as the vocabulary says and parse special-token texts.
void check_cases(const Tokenizer& tok, const std::string& name, const std::vector<Case>& cases,
                 bool special = false) {
  int failures = 0;
  for (const auto& c : cases) {
    const auto got = tok.encode(c.text, special, special);
    EXPECT_EQ(got, c.ids) << name << ": text '" << c.text << "'";
    failures += got != c.ids;
  }
  EXPECT_EQ(failures, 0) << name << ": " << failures << " of " << cases.size() << " differ";
}

void check_golden(const Tokenizer& tok, const std::string& name,
                  const std::filesystem::path& dir = golden_dir()) {
  const auto cases = load_cases(name, dir);
  ASSERT_GE(cases.size(), 30u) << name;
  check_cases(tok, name, cases);
}

void check_vocab_file(const std::string& name) {
  const Tokenizer* tok = testing_util::golden_tokenizer(name);
  ASSERT_NE(tok, nullptr) << name;
  check_golden(*tok, name);
}

TEST(TokenizerGolden, LlamaSpm) {
  check_vocab_file("llama-spm");
}
TEST(TokenizerGolden, Phi3) {
  check_vocab_file("phi-3");
}
TEST(TokenizerGolden, Gpt2) {
  check_vocab_file("gpt-2");
}
TEST(TokenizerGolden, DeepseekLlm) {
  check_vocab_file("deepseek-llm");
}
// Copied unchanged from llama.cpp's models/ (docs/TOKENIZER.md).
TEST(TokenizerGolden, DeepseekCoder) {
  const auto dir = std::filesystem::path(HYPURA_SOURCE_DIR) / "src/tokenizer/testdata/llama.cpp";
  const Tokenizer* tok =
      testing_util::load_cached((dir / "ggml-vocab-deepseek-coder.gguf").string());
  ASSERT_NE(tok, nullptr);
  check_golden(*tok, "deepseek-coder", dir);
}

void check_real_model(const std::string& name, std::initializer_list<std::string_view> kinds,
                      std::string_view file_prefix = "") {
  const Tokenizer* tok = testing_util::real_model_tokenizer(kinds, file_prefix);
  if (tok == nullptr) {
    GTEST_SKIP() << "no model with a " << name
                 << " tokenizer in test-models/ (run scripts/fetch-models.sh)";
  }
  check_golden(*tok, name);
}

TEST(TokenizerGolden, Qwen2WithRealVocab) {
  check_real_model("qwen2", {"gpt2/qwen2"}, "qwen2");
}
TEST(TokenizerGolden, LlamaBpeWithRealVocab) {
  check_real_model("llama-bpe", {"gpt2/llama-bpe", "gpt2/llama3", "gpt2/llama-v3"});
}

// llama.cpp's list ("id eog piece-in-hex" per line) of the tokens that end generation or
// print as text although not normal tokens, against ours.
void check_specials(const Tokenizer& tok, const std::filesystem::path& path) {
  using Entry = std::pair<bool, std::string>;
  std::map<int32_t, Entry> want, got;
  std::istringstream lines(read_file(path));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    int32_t id = -1;
    int eog = 0;
    std::string hex, piece;
    fields >> id >> eog >> hex;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      piece += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    want[id] = {eog != 0, piece};
  }
  ASSERT_FALSE(want.empty()) << path;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const TokenType t = tok.vocab().types[id];
    const bool normal = t == TokenType::kNormal || t == TokenType::kByte;
    const std::string piece = normal ? "" : tok.token_to_piece(id);
    if (tok.is_end_of_generation(id) || !piece.empty()) {
      got[id] = {tok.is_end_of_generation(id), piece};
    }
  }
  EXPECT_EQ(got, want) << path;
}

// Vocabularies that llama.cpp's models/ folder lacks, built from the models' public
// tokenizer definitions into test-models/vocab/ by scripts/fetch-models.sh (with
// scripts/make_vocab_gguf.py); the expected ids in testdata/vocab/ are llama.cpp's
// llama_tokenize on the same files, plain and with special tokens (docs/TOKENIZER.md).
void check_built_vocab(const std::string& name) {
  const auto path = std::filesystem::path(HYPURA_SOURCE_DIR) / "test-models" / "vocab" /
                    ("ggml-vocab-" + name + ".gguf");
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is missing (run scripts/fetch-models.sh)";
  }
  const Tokenizer* tok = testing_util::load_cached(path.string());
  ASSERT_NE(tok, nullptr) << path;
  const auto data = std::filesystem::path(HYPURA_SOURCE_DIR) / "src/tokenizer/testdata/vocab";
  const auto plain = load_cases(data / "strings.inp", data / (name + ".out"));
  ASSERT_GE(plain.size(), 70u) << name;
  check_cases(*tok, name, plain);
  const auto special = load_cases(data / "strings-special.inp", data / (name + ".special.out"));
  ASSERT_GE(special.size(), 9u) << name;
  check_cases(*tok, name + " (special)", special, /*special=*/true);
  check_specials(*tok, data / (name + ".specials"));
}

TEST(TokenizerGolden, DeepseekV3WithRealVocab) {
  check_built_vocab("deepseek-v3");
}
TEST(TokenizerGolden, GptOssWithRealVocab) {
  check_built_vocab("gpt-oss");
}
// GLM-4's split (tokenizer.ggml.pre = glm4) on the o200k vocabulary: no GLM vocabulary is
// reachable from here, so this checks the split and BOS rule, not GLM's own ids.
TEST(TokenizerGolden, Glm4SplitOnO200kVocab) {
  check_built_vocab("o200k-glm4");
}
// Likewise Mistral's tekken split (same case classes as gpt-4o, whole-word tokens, BOS).
TEST(TokenizerGolden, TekkenSplitOnO200kVocab) {
  check_built_vocab("o200k-tekken");
}

// Speed guard and measurement (figures in docs/BENCHMARKS.md): ~64 KB of mixed text,
// including 4 KB single "words", must encode in milliseconds, not seconds (no O(n^2)).
// Real models are used when present; parse_special = true exercises the special-token
// split with Gemma 3's 6,400 special tokens.
double encode_ms(const Tokenizer& tok, const std::string& text, bool parse_special, size_t* n) {
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {  // best of 3: the machine is shared
    const auto t0 = std::chrono::steady_clock::now();
    *n = tok.encode(text, true, parse_special).size();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

// Prints the speed (a figure, not a check: unit tests assert no wall-clock bounds).
TEST(TokenizerGolden, EncodesLongText) {
  std::string text;
  for (const auto& c : load_cases("llama-spm")) text += c.text;
  text = text + text + text + text;
  text += std::string(4096, 'a') + std::string(2048, ' ') + "\n";
  while (text.size() < 60000) text += "The capital of France is Paris. 12345 <|im_start|> ";
  std::vector<std::pair<std::string, const Tokenizer*>> toks = {
      {"llama-spm", testing_util::golden_tokenizer("llama-spm")},
      {"gpt-2", testing_util::golden_tokenizer("gpt-2")},
      {"deepseek-llm", testing_util::golden_tokenizer("deepseek-llm")},
      {"smollm2", testing_util::real_model_tokenizer({"gpt2/smollm"}, "smollm2")},
      {"qwen2.5", testing_util::real_model_tokenizer({"gpt2/qwen2"}, "qwen2")},
      {"gemma3", testing_util::real_model_tokenizer({"llama/default"}, "gemma")}};
  for (const auto& [name, tok] : toks) {
    if (tok == nullptr) continue;
    for (bool parse_special : {false, true}) {
      size_t n = 0;
      const double ms = encode_ms(*tok, text, parse_special, &n);
      EXPECT_GT(n, text.size() / 10) << name;
      std::printf(
          "[ perf ] %-12s parse_special=%d: %zu bytes -> %zu tokens in %.2f ms (%.1f MB/s)\n",
          name.c_str(), parse_special, text.size(), n, ms, text.size() / ms / 1e3);
    }
  }
}

}  // namespace
}  // namespace hypura::tokenizer
