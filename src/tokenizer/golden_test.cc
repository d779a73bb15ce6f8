// Tokenizers against llama.cpp's expected ids (../shared/golden/tokenizer/, format in
// its README): encode(add_special = false, parse_special = false) must give exactly the
// recorded ids for every test string.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace hypura::tokenizer {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(HYPURA_GOLDEN_DIR) / "tokenizer";

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// .inp: strings each followed by "\n__ggml_vocab_test__\n"; .out: one id list per line.
std::vector<Case> load_cases(const std::string& name) {
  const std::string inp = read_all(kGolden / ("ggml-vocab-" + name + ".gguf.inp"));
  const std::string out = read_all(kGolden / ("ggml-vocab-" + name + ".gguf.out"));
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

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& gguf_path) {
  auto file = gguf::GgufFile::open(gguf_path.string());
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  if (!file.is_ok()) return nullptr;
  auto tok = Tokenizer::from_metadata(file->metadata());
  EXPECT_TRUE(tok.is_ok()) << tok.status().message();
  return tok.is_ok() ? std::move(tok).value() : nullptr;
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
  auto tok = load_tokenizer(kGolden / ("ggml-vocab-" + name + ".gguf"));
  ASSERT_NE(tok, nullptr);
  check_golden(*tok, name);
}

TEST(TokenizerGolden, LlamaSpm) { check_vocab_file("llama-spm"); }
TEST(TokenizerGolden, Phi3) { check_vocab_file("phi-3"); }
TEST(TokenizerGolden, Gpt2) { check_vocab_file("gpt-2"); }
TEST(TokenizerGolden, DeepseekLlm) { check_vocab_file("deepseek-llm"); }

// The first model in test-models/ whose tokenizer.ggml.pre is one of `pres`, or "".
std::string find_real_model(std::initializer_list<std::string_view> pres) {
  const fs::path dir = fs::path(HYPURA_SOURCE_DIR) / "test-models";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".gguf" && !fs::is_symlink(e.path())) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    auto file = gguf::GgufFile::open(p.string());
    if (!file.is_ok()) continue;
    auto pre = file->metadata().get_string("tokenizer.ggml.pre");
    for (auto want : pres) {
      if (pre && *pre == want) return p.string();
    }
  }
  return "";
}

void check_real_model(const std::string& name, std::initializer_list<std::string_view> pres) {
  const std::string path = find_real_model(pres);
  if (path.empty()) {
    GTEST_SKIP() << "no model with a " << name
                 << " tokenizer in test-models/ (run scripts/fetch-models.sh)";
  }
  auto tok = load_tokenizer(path);
  ASSERT_NE(tok, nullptr);
  check_golden(*tok, name);
}

TEST(TokenizerGolden, Qwen2WithRealVocab) { check_real_model("qwen2", {"qwen2"}); }
TEST(TokenizerGolden, LlamaBpeWithRealVocab) {
  check_real_model("llama-bpe", {"llama-bpe", "llama3", "llama-v3"});
}

// Speed guard, not a benchmark: a few KB must encode in milliseconds (no O(n^2)).
TEST(TokenizerGolden, EncodesLongTextFast) {
  for (const std::string name : {"llama-spm", "gpt-2"}) {
    auto tok = load_tokenizer(kGolden / ("ggml-vocab-" + name + ".gguf"));
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
