// Test helpers shared by the tokenizer tests: vocabularies loaded once per test binary.
//
// golden_tokenizer("llama-spm") loads ../shared/golden/tokenizer/ggml-vocab-<name>.gguf;
// real_model_tokenizer({"qwen2"}) loads the first test-models/*.gguf whose
// tokenizer.ggml.pre is one of the names (nullptr when none: callers GTEST_SKIP).
// Loading is the slow part of these tests, so each file is opened once.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace hypura::tokenizer::testing_util {

inline std::filesystem::path golden_dir() {
  return std::filesystem::path(HYPURA_GOLDEN_DIR) / "tokenizer";
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::map<std::string, std::unique_ptr<Tokenizer>>& tokenizer_cache() {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;  // path -> tokenizer
  return cache;
}

inline std::unique_ptr<Tokenizer> tokenizer_of(const gguf::GgufFile& file) {
  auto r = Tokenizer::from_metadata(file.metadata());
  return r.is_ok() ? std::move(r).value() : nullptr;
}

// Loads (once) the tokenizer of a GGUF file; nullptr when it does not load.
inline const Tokenizer* load_cached(const std::string& path) {
  auto& cache = tokenizer_cache();
  auto it = cache.find(path);
  if (it != cache.end()) return it->second.get();
  auto file = gguf::GgufFile::open(path);
  auto tok = file.is_ok() ? tokenizer_of(*file) : nullptr;
  return cache.emplace(path, std::move(tok)).first->second.get();
}

inline const Tokenizer* golden_tokenizer(const std::string& name) {
  return load_cached((golden_dir() / ("ggml-vocab-" + name + ".gguf")).string());
}

struct RealModel {
  std::string kind;  // "tokenizer.ggml.model/tokenizer.ggml.pre", e.g. "gpt2/qwen2"
  std::string path;
  std::shared_ptr<gguf::GgufFile> file;  // kept so the tokenizer is built only if asked
};

// The real models in test-models/ (each opened once per test binary).
inline const std::vector<RealModel>& real_models() {
  static const auto models = [] {
    std::vector<RealModel> out;
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(HYPURA_SOURCE_DIR) / "test-models";
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".gguf" && !fs::is_symlink(e.path())) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
      auto file = gguf::GgufFile::open(p.string());
      if (!file.is_ok()) continue;
      auto model = file->metadata().get_string("tokenizer.ggml.model");
      auto pre = file->metadata().get_string("tokenizer.ggml.pre");
      out.push_back({(model ? *model : "") + "/" + (pre ? *pre : ""), p.string(),
                     std::make_shared<gguf::GgufFile>(std::move(file).value())});
    }
    return out;
  }();
  return models;
}

// The first real model whose kind (e.g. "gpt2/qwen2", "llama/default") is listed and
// whose file name starts with `file_prefix` (test-models/ also holds synthetic models
// with copied vocabularies, so tests that check a model's own ids name its file).
inline const Tokenizer* real_model_tokenizer(std::initializer_list<std::string_view> kinds,
                                             std::string_view file_prefix = "") {
  for (const auto& m : real_models()) {
    const std::string file = std::filesystem::path(m.path).filename().string();
    if (!file.starts_with(file_prefix)) continue;
    for (auto want : kinds) {
      if (m.kind != want) continue;
      auto& cache = tokenizer_cache();
      auto it = cache.find(m.path);
      if (it == cache.end()) it = cache.emplace(m.path, tokenizer_of(*m.file)).first;
      return it->second.get();
    }
  }
  return nullptr;
}

}  // namespace hypura::tokenizer::testing_util
