// Test fixtures over the golden models of ../shared/golden (llama.cpp's reference
// outputs): their token sequences, logit comparisons, the models opened, and logits
// through any WeightProvider. For tests only (needs HYPURA_GOLDEN_DIR); the tiered tests'
// starting point is runtime/testing/golden_fixtures.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/compute.h"
#include "gguf/gguf.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/weight_provider.h"

namespace hypura::model::golden {

inline const std::string kDir = HYPURA_GOLDEN_DIR;

// A token sequence of manifest.json ("A", "B", ...).
inline std::vector<int32_t> sequence(const std::string& name) {
  std::ifstream in(kDir + "/manifest.json");
  return nlohmann::json::parse(in)["sequences"][name].get<std::vector<int32_t>>();
}

// How far logits are from a reference: rel_l2 = ||got - want||_2 / ||want||_2 over the whole
// array, and the largest absolute difference.
struct Diff {
  double rel_l2 = 0, max_abs = 0;
};

inline Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0, max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
    max_abs = std::max(max_abs, std::abs(d));
  }
  return {std::sqrt(num / den), max_abs};
}

inline int64_t argmax(const float* row, int64_t n) {
  return std::max_element(row, row + n) - row;
}

// The gap between a row's two largest logits.
inline double margin(const float* row, int64_t n) {
  std::vector<float> v(row, row + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

// Rows whose argmax agrees with the reference's, over all rows and over the rows where the
// reference's top-1 margin exceeds min_margin ("confident").
struct Top1 {
  int agree = 0, rows = 0, agree_confident = 0, rows_confident = 0;
};

inline Top1 top1(const std::vector<float>& got, const std::vector<float>& want, int64_t n_vocab,
                 double min_margin) {
  Top1 t;
  for (size_t r = 0; r * n_vocab < want.size(); ++r) {
    const bool same = argmax(&got[r * n_vocab], n_vocab) == argmax(&want[r * n_vocab], n_vocab);
    t.rows++;
    t.agree += same;
    if (margin(&want[r * n_vocab], n_vocab) > min_margin) {
      t.rows_confident++;
      t.agree_confident += same;
    }
  }
  return t;
}

// A raw little-endian float32 logits file ([n_tokens, n_vocab], no header); empty if absent.
inline std::vector<float> read_f32_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const auto size = static_cast<size_t>(in.tellg());
  std::vector<float> v(size / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(size));
  return v;
}

struct Model {
  gguf::GgufFile file;
  std::shared_ptr<const model::Model> model;
};

// Opens <name>.gguf; a failure fails the test and leaves `model` null.
inline Model open_model(const std::string& name) {
  Model m;
  auto file = gguf::GgufFile::open(kDir + "/" + name + ".gguf");
  if (!file.is_ok()) {
    ADD_FAILURE() << file.status().message();
    return m;
  }
  m.file = std::move(file).value();
  auto model = model::Model::create(m.file);
  if (!model.is_ok()) {
    ADD_FAILURE() << model.status().message();
    return m;
  }
  m.model = model.value();
  return m;
}

// Logits (n_tokens, n_vocab) of `tokens` through `provider`: the first `first_batch` as one
// forward pass (a prompt), then one token per pass (generation). Stops at the first failed
// pass and returns its Status. *n_passes (when given) counts the passes run.
inline Status forward_logits(const std::shared_ptr<const model::Model>& m,
                             model::WeightProvider& provider, const std::vector<int32_t>& tokens,
                             int64_t first_batch, std::vector<float>* logits,
                             uint64_t* n_passes = nullptr) {
  const int64_t n_vocab = m->hparams().n_vocab;
  const auto n_ctx = static_cast<int64_t>(tokens.size());
  compute::Context ctx(2);
  model::KvCache kv(m->hparams(), n_ctx, false);
  model::Forward fwd(m, ctx, provider, std::max<int64_t>(first_batch, 1), n_ctx);
  logits->assign(tokens.size() * n_vocab, 0.0f);
  if (n_passes != nullptr) *n_passes = 0;
  for (size_t i = 0; i < tokens.size();) {
    const int64_t n =
        std::min<int64_t>(i == 0 ? first_batch : 1, static_cast<int64_t>(tokens.size() - i));
    HYPURA_RETURN_IF_ERROR(fwd.run(tokens.data() + i, n, static_cast<int64_t>(i), kv, true,
                                   logits->data() + i * n_vocab));
    if (n_passes != nullptr) ++*n_passes;
    i += static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace hypura::model::golden
