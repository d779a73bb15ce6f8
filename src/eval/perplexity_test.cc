// Perplexity and KL divergence (runtime/perplexity.h): the golden F32 models' perplexity
// equals the one computed from llama.cpp's logits in ../shared/golden, a model against its
// own saved log-probs gives KL 0 and 100% top-1, and bad log-prob files fail cleanly.
#include "eval/perplexity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "runtime/testing/golden_fixtures.h"
#include "tiers/testing/resident_provider.h"

namespace hypura::eval {
namespace {

std::vector<float> read_golden_logits(const std::string& file) {
  std::ifstream in(runtime::golden::kDir + "/" + file, std::ios::binary | std::ios::ate);
  std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

// An EvalFn over a golden model: every chunk from an empty cache, one forward pass.
struct GoldenEval {
  runtime::golden::Model m;
  std::unique_ptr<tiers::ResidentProvider> provider;

  explicit GoldenEval(const std::string& name) : m(runtime::golden::open_model(name)) {
    auto p = tiers::ResidentProvider::load(m.file, nullptr);
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    if (p.is_ok()) provider = std::move(p).value();
  }
  int64_t n_vocab() const { return m.model->hparams().n_vocab; }
  EvalFn fn() {
    return [this](const std::vector<int32_t>& tokens, std::vector<float>* logits) {
      return runtime::golden::forward_logits(m.model, *provider, tokens,
                                             static_cast<int64_t>(tokens.size()), logits);
    };
  }
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("hypura_ppl_" + std::to_string(getpid()) + "_" + name))
      .string();
}

// Perplexity of the scored half of sequence C from llama.cpp's exact-variant logits,
// computed here in float64 independently of the module under test.
double golden_perplexity(const std::string& model, const std::vector<int32_t>& c) {
  const std::vector<float> logits = read_golden_logits(model + ".C.kvf32_fa_off.logits.f32");
  const auto n_ctx = static_cast<int64_t>(c.size());
  const int64_t n_vocab = static_cast<int64_t>(logits.size()) / n_ctx;
  double sum = 0;
  int64_t n = 0;
  for (int64_t j = n_ctx / 2; j < n_ctx - 1; ++j, ++n) {
    const float* row = logits.data() + j * n_vocab;
    double max = row[0], z = 0;
    for (int64_t i = 0; i < n_vocab; ++i) max = std::max<double>(max, row[i]);
    for (int64_t i = 0; i < n_vocab; ++i) z += std::exp(row[i] - max);
    sum += -(row[c[j + 1]] - max - std::log(z));
  }
  return std::exp(sum / static_cast<double>(n));
}

TEST(Perplexity, GoldenF32ModelsMatchLlamaCppLogits) {
  const std::vector<int32_t> c = runtime::golden::sequence("C");  // BOS first, 41 tokens
  for (const char* name : {"llama-f32", "qwen2-f32", "gemma3-f32", "mixtral-f32"}) {
    GoldenEval g(name);
    ASSERT_NE(g.provider, nullptr);
    PerplexityOptions o;
    o.n_ctx = static_cast<int64_t>(c.size());
    auto chunks = make_chunks(c, o.n_ctx, 0, c[0]);
    ASSERT_TRUE(chunks.is_ok());
    auto r = evaluate_perplexity(g.fn(), g.n_vocab(), *chunks, o);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->nll.count, scored_per_chunk(o.n_ctx));
    // Each NLL moves by at most twice the logits' error (the token's logit and the
    // log-sum-exp), so ln(PPL) gets golden_test's per-logit bound for these models, twice.
    const double tol_abs = std::string(name) == "gemma3-f32" ? 5e-3 : 2e-4;
    const double want = golden_perplexity(name, c);
    EXPECT_NEAR(std::log(r->nll.perplexity()), std::log(want), 2 * tol_abs) << name;
    EXPECT_GT(r->nll.perplexity_stderr(), 0.0);
  }
}

TEST(Perplexity, ModelAgainstItsOwnLogitsHasZeroKl) {
  GoldenEval g("qwen2-q4_k_m");
  ASSERT_NE(g.provider, nullptr);
  std::vector<int32_t> tokens = runtime::golden::sequence("C");
  const std::vector<int32_t> b = runtime::golden::sequence("B");
  tokens.insert(tokens.end(), b.begin(), b.end());  // 54 tokens: three chunks of 16
  auto chunks = make_chunks(tokens, 16, 0, tokens[0]);
  ASSERT_TRUE(chunks.is_ok());
  ASSERT_EQ(chunks->size(), 48u);
  const std::string path = temp_path("self.logp");
  {
    auto w = LogProbWriter::create(path, g.n_vocab(), 16, 3, *chunks);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    PerplexityOptions o;
    o.n_ctx = 16;
    o.save = w->get();
    auto r = evaluate_perplexity(g.fn(), g.n_vocab(), *chunks, o);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ASSERT_TRUE((*w)->close().is_ok());
  }
  auto reader = LogProbReader::open(path);
  ASSERT_TRUE(reader.is_ok()) << reader.status().message();
  PerplexityOptions o;
  o.n_ctx = 16;
  o.compare = reader->get();
  auto r = evaluate_perplexity(g.fn(), g.n_vocab(), (*reader)->tokens(), o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->kl.kl.size(), 3 * scored_per_chunk(16));
  // float32 storage of the log-probs: KL within a few float roundings of 0.
  EXPECT_LT(r->kl.max(), 1e-6);
  EXPECT_EQ(r->kl.top1_agreement(), 1.0);
  EXPECT_NEAR(r->kl.reference_nll.mean(), r->nll.mean(), 1e-6);
  std::filesystem::remove(path);
}

TEST(Perplexity, QuantizedModelAgainstExactOne) {
  // The Q4_K_M golden model scored against its F32 twin: a small, positive KL and a top-1
  // agreement below 100% but far above chance (384 tokens).
  GoldenEval exact("llama-f32"), quant("llama-q4_k_m");
  ASSERT_NE(exact.provider, nullptr);
  ASSERT_NE(quant.provider, nullptr);
  const std::vector<int32_t> c = runtime::golden::sequence("C");
  auto chunks = make_chunks(c, 40, 0, c[0]);
  ASSERT_TRUE(chunks.is_ok());
  const std::string path = temp_path("exact.logp");
  auto w = LogProbWriter::create(path, exact.n_vocab(), 40, 1, *chunks);
  ASSERT_TRUE(w.is_ok());
  PerplexityOptions o;
  o.n_ctx = 40;
  o.save = w->get();
  ASSERT_TRUE(evaluate_perplexity(exact.fn(), exact.n_vocab(), *chunks, o).is_ok());
  ASSERT_TRUE((*w)->close().is_ok());
  auto reader = LogProbReader::open(path);
  ASSERT_TRUE(reader.is_ok());
  o.save = nullptr;
  o.compare = reader->get();
  auto r = evaluate_perplexity(quant.fn(), quant.n_vocab(), *chunks, o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GT(r->kl.mean(), 1e-5);
  EXPECT_LT(r->kl.mean(), 1.0);
  EXPECT_GE(r->kl.quantile(0.99), r->kl.quantile(0.5));
  EXPECT_GT(r->kl.top1_agreement(), 0.5);
  std::filesystem::remove(path);
}

TEST(Perplexity, StatisticsByHand) {
  NllStats s;
  for (double v : {1.0, 2.0, 3.0}) s.add(v);
  EXPECT_DOUBLE_EQ(s.mean(), 2.0);
  EXPECT_NEAR(s.mean_stderr(), std::sqrt(1.0 / 3.0), 1e-12);  // sample var 1, n 3
  EXPECT_NEAR(s.perplexity(), std::exp(2.0), 1e-12);
  KlStats k;
  const std::vector<double> p = {std::log(0.5), std::log(0.5)};
  const std::vector<double> q = {std::log(0.25), std::log(0.75)};
  k.add(p, q, 0);
  k.add(p, p, 1);
  EXPECT_NEAR(k.kl[0], 0.5 * std::log(2.0) + 0.5 * std::log(0.5 / 0.75), 1e-12);
  EXPECT_EQ(k.kl[1], 0.0);
  EXPECT_EQ(k.top1_agree, 1);  // argmax: first of ties (0) vs 1
  EXPECT_EQ(k.quantile(0.5), 0.0);
  EXPECT_EQ(k.quantile(0.99), k.kl[0]);
}

TEST(Perplexity, ChunkingErrors) {
  const std::vector<int32_t> t(10, 5);
  EXPECT_FALSE(make_chunks(t, 3, 0, 1).is_ok());   // context below 4
  EXPECT_FALSE(make_chunks(t, 11, 0, 1).is_ok());  // not one chunk
  auto c = make_chunks(t, 4, 0, 1);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(*c, (std::vector<int32_t>{1, 5, 5, 5, 1, 5, 5, 5}));
  auto one = make_chunks(t, 4, 1, -1);
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(*one, (std::vector<int32_t>{5, 5, 5, 5}));
}

TEST(Perplexity, BadLogProbFilesFailCleanly) {
  const std::string path = temp_path("bad.logp");
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  write("");
  EXPECT_FALSE(LogProbReader::open(path).is_ok());
  write("HYPLOGP1 and then garbage");
  EXPECT_FALSE(LogProbReader::open(path).is_ok());
  // A valid file, then truncated by one byte: the size check names it.
  const std::vector<int32_t> tokens = {1, 2, 0, 2};
  {
    auto w = LogProbWriter::create(path, 3, 4, 1, tokens);
    ASSERT_TRUE(w.is_ok());
    ASSERT_TRUE((*w)->write_row({-1.0, -2.0, -3.0}).is_ok());
    ASSERT_TRUE((*w)->close().is_ok());
  }
  ASSERT_TRUE(LogProbReader::open(path).is_ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  auto r = LogProbReader::open(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
  // A header whose sizes wrap 64 bits, and token ids outside the vocabulary, are refused.
  {
    std::ofstream out(path, std::ios::binary);
    const uint32_t header[4] = {1u << 24, 1u << 24, 0xFFFFFFFFu, 0};
    out.write("HYPLOGP1", 8);
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
  }
  EXPECT_FALSE(LogProbReader::open(path).is_ok());
  {
    auto w = LogProbWriter::create(path, 3, 4, 1, {1, 2, 3, -7});
    ASSERT_TRUE((*w)->write_row({-1.0, -2.0, -3.0}).is_ok());
    ASSERT_TRUE((*w)->close().is_ok());
  }
  auto bad_token = LogProbReader::open(path);
  ASSERT_FALSE(bad_token.is_ok());
  EXPECT_NE(bad_token.status().message().find("outside the vocabulary"), std::string::npos);
  // Another vocabulary or other tokens are refused before any evaluation.
  {
    auto w = LogProbWriter::create(path, 3, 4, 1, tokens);
    ASSERT_TRUE((*w)->write_row({-1.0, -2.0, -3.0}).is_ok());
    ASSERT_TRUE((*w)->close().is_ok());
  }
  auto ok = LogProbReader::open(path);
  ASSERT_TRUE(ok.is_ok());
  PerplexityOptions o;
  o.n_ctx = 4;
  o.compare = ok->get();
  int evals = 0;
  EvalFn never = [&](const std::vector<int32_t>&, std::vector<float>*) {
    ++evals;
    return Status::ok();
  };
  EXPECT_FALSE(evaluate_perplexity(never, 5, tokens, o).is_ok());
  EXPECT_FALSE(evaluate_perplexity(never, 3, {1, 2, 0, 1}, o).is_ok());
  EXPECT_EQ(evals, 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace hypura::eval
