// Test fixtures over the golden models of ../shared/golden (llama.cpp's reference
// outputs): their token sequences, logit comparisons, the models opened, and logits
// through any WeightProvider. For tests only (needs HYPURA_GOLDEN_DIR); the tiered tests'
// starting point is runtime/testing/golden_fixtures.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
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

// A forward pass, its KV cache and the CPU threads it runs on (none for the GPU alone).
struct OwnedPass {
  std::unique_ptr<compute::Context> ctx;
  std::unique_ptr<model::KvCache> kv;
  std::unique_ptr<model::Forward> fwd;
};

// The logits of the last of `tokens` through a fresh pass (make(n_ctx)): the first
// `prefix` tokens in batches of up to 64, the rest one per step, as decoding gives them.
template <class MakePass>
std::vector<float> stepped_logits(MakePass& make, int64_t n_vocab, int64_t n_ctx,
                                  const std::vector<int32_t>& tokens, int64_t prefix) {
  auto pass = make(n_ctx);
  std::vector<float> out(static_cast<size_t>(n_vocab));
  const auto n = static_cast<int64_t>(tokens.size());
  for (int64_t i = 0; i < n;) {
    const int64_t step = i < prefix ? std::min<int64_t>(64, prefix - i) : 1;
    const Status st = pass.fwd->run(tokens.data() + i, step, i, *pass.kv, false, out.data());
    EXPECT_TRUE(st.is_ok()) << st.message();
    i += step;
  }
  return out;
}

// A draft tree verified in one pass (model::SeqRows's tree rows): every node's logits are
// its branch's decoded alone, bit for bit; once the kept branch's rows move to their
// positions (KvCache::keep_branch) the next token's are the branch's too. Prefixes put the
// tree inside a key block, and across a 512-key segment with the pass in two batches (as
// the step batcher may split it). Token ids stay under 20 (every golden vocabulary).
// make(n_ctx): a pass (its .fwd and .kv) on the device under test, batches up to 64 rows.
template <class MakePass>
void expect_draft_tree_rows_as_branches(MakePass make, int64_t n_vocab, const std::string& name) {
  const std::vector<int32_t> tokens = {11, 12, 13, 14, 15, 16, 17};
  const std::vector<int32_t> parent = {-1, 0, 0, 1, 2, 2, 5};
  const std::vector<int32_t> kept = {0, 2, 5, 6};
  constexpr int64_t kN = 7, kCtx = 600;
  const auto branch = [&](std::vector<int32_t> seq, int32_t node) {
    const auto at = static_cast<std::ptrdiff_t>(seq.size());
    for (; node >= 0; node = parent[static_cast<size_t>(node)])
      seq.insert(seq.begin() + at, tokens[static_cast<size_t>(node)]);
    return seq;
  };
  for (const int64_t prefix : {int64_t{70}, int64_t{510}}) {
    std::vector<int32_t> before(static_cast<size_t>(prefix));
    for (int64_t i = 0; i < prefix; ++i) before[static_cast<size_t>(i)] = 3 + (i * 37) % 17;
    auto pass = make(kCtx);
    ASSERT_TRUE(pass.fwd && pass.kv) << name;
    std::vector<float> got(static_cast<size_t>(kN * n_vocab));
    for (int64_t i = 0; i < prefix; i += 64) {
      const Status st = pass.fwd->run(before.data() + i, std::min<int64_t>(64, prefix - i), i,
                                      *pass.kv, false, got.data());
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
    const int64_t first = prefix == 70 ? kN : 3;  // the pass's first batch
    for (int64_t from = 0; from < kN;) {
      const int64_t n = from == 0 ? first : kN - from;
      model::SeqRows rows{pass.kv.get(), prefix + from, n, n};
      rows.tree_parent = parent.data();
      rows.tree_base = prefix;
      const Status st = pass.fwd->run_batch(tokens.data() + from, std::span(&rows, 1),
                                            got.data() + from * n_vocab);
      ASSERT_TRUE(st.is_ok()) << st.message();
      from += n;
    }
    for (int32_t node = 0; node < kN; ++node) {
      const auto want = stepped_logits(make, n_vocab, kCtx, branch(before, node), prefix);
      EXPECT_EQ(0, std::memcmp(got.data() + node * n_vocab, want.data(), want.size() * 4))
          << name << " prefix " << prefix << " node " << node;
    }
    const Status moved = pass.kv->keep_branch(prefix, kept);
    ASSERT_TRUE(moved.is_ok()) << moved.message();
    const int32_t next = 18;
    const Status st = pass.fwd->run(&next, 1, prefix + static_cast<int64_t>(kept.size()), *pass.kv,
                                    false, got.data());
    ASSERT_TRUE(st.is_ok()) << st.message();
    std::vector<int32_t> seq = branch(before, kept.back());
    seq.push_back(next);
    const auto want = stepped_logits(make, n_vocab, kCtx, seq, prefix);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4))
        << name << " prefix " << prefix << " after the kept branch";
  }
}

// The same on the CPU.
inline void expect_draft_tree_rows_as_branches(const std::shared_ptr<const model::Model>& m,
                                               model::WeightProvider& provider,
                                               const std::string& name) {
  const auto make = [&](int64_t n_ctx) {
    OwnedPass p;
    p.ctx = std::make_unique<compute::Context>(2);
    p.kv = std::make_unique<model::KvCache>(m->hparams(), n_ctx, false);
    p.fwd = std::make_unique<model::Forward>(m, *p.ctx, provider, 64, n_ctx);
    return p;
  };
  expect_draft_tree_rows_as_branches(make, m->hparams().n_vocab, name);
}

}  // namespace hypura::model::golden
