// Test fixtures over the golden models of ../shared/golden (llama.cpp's reference
// outputs): their token sequences, the models opened, the tiered tests' starting point,
// and logits through any WeightProvider. For the tests of runtime/ and eval/ only (needs
// HYPURA_GOLDEN_DIR).
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
#include "runtime/tiered_weights.h"

namespace hypura::runtime::golden {

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

// TieredWeights options of the tiered tests: the fixture profile (the same plan on every
// machine, no storage benchmark), a small context and batch, no mlock.
inline TierOptions fixture_tier_options() {
  TierOptions opts;
  opts.plan.profile_file = std::string(HYPURA_SOURCE_DIR) + "/src/scheduler/testdata/cpu_24g.json";
  opts.plan.budgets.n_ctx = 64;
  opts.plan.budgets.n_batch = 16;
  opts.lock_resident = false;
  return opts;
}

// Where the tiered tests start: a golden model, the first ten tokens of sequence "B", the
// fixture options, and the RAM that the resident plan under those options needs (the
// model is loaded once to check that plan is full-resident and streams nothing, then
// released). A failure fails the test and leaves `resident_ram` 0.
struct TieredStart {
  Model m;
  std::vector<int32_t> tokens;
  TierOptions opts;
  uint64_t resident_ram = 0;
};

inline TieredStart tiered_start(const std::string& name) {
  TieredStart s;
  s.m = open_model(name);
  if (s.m.model == nullptr) return s;
  s.tokens = sequence("B");
  s.tokens.resize(10);
  s.opts = fixture_tier_options();
  auto roomy = TieredWeights::load(s.m.file, s.opts);
  if (!roomy.is_ok()) {
    ADD_FAILURE() << roomy.status().message();
    return s;
  }
  const TieredWeights& w = *roomy.value();
  if (w.mode() != "full-resident" || w.streamed_bytes_per_pass() != 0) {
    ADD_FAILURE() << "the roomy plan is " << w.mode() << " streaming "
                  << w.streamed_bytes_per_pass() << " B per pass, not full-resident";
    return s;
  }
  s.resident_ram = w.plan().memory.ram_total();
  return s;
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

}  // namespace hypura::runtime::golden
