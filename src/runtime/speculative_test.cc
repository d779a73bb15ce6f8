// Speculative decoding: the drafters, the draft-length rule, rejection sampling against the
// target's own distribution, and generation on a real model with and without speculation
// (greedy: the same text, token for token).
#include "runtime/speculative.h"

#include <gtest/gtest.h>

#include <array>
#include <filesystem>

#include "runtime/sampler.h"

namespace hypura::runtime {
namespace {

TEST(LookupDrafter, ContinuesTheLatestEarlierOccurrenceOfTheLongestTail) {
  LookupDrafter d;
  DraftTree out;
  const std::vector<int32_t> context = {1, 2, 3, 4, 9, 1, 2, 3};
  ASSERT_TRUE(d.propose(context, {8, 0}, &out).is_ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{4, 9, 1, 2, 3}));  // after the earlier "1 2 3"
  EXPECT_EQ(out.parent, (std::vector<int32_t>{-1, 0, 1, 2, 3}));
  EXPECT_EQ(out.main, 5);
  ASSERT_TRUE(d.propose(context, {2, 0}, &out).is_ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{4, 9}));
  // "7 1 2" occurs twice before the tail: the later one's continuation (5) wins.
  const std::vector<int32_t> twice = {7, 1, 2, 6, 7, 1, 2, 5, 7, 1, 2};
  ASSERT_TRUE(d.propose(twice, {1, 0}, &out).is_ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{5}));
  const std::vector<int32_t> fresh = {1, 2, 3, 4, 5};  // no repeated n-gram: no guess
  ASSERT_TRUE(d.propose(fresh, {8, 0}, &out).is_ok());
  EXPECT_EQ(out.size(), 0u);
}

TEST(LookupDrafter, EarlierOccurrencesBranchOffWhereTheyDiffer) {
  LookupDrafter d;
  DraftTree out;
  // "1 2" is followed by 5 6 (latest), 5 8 and 7: the main branch 5 6, then 8 after 5 and
  // 7 at the root.
  const std::vector<int32_t> context = {1, 2, 7, 0, 1, 2, 5, 8, 1, 2, 5, 6, 1, 2};
  ASSERT_TRUE(d.propose(context, {2, 4}, &out).is_ok());
  EXPECT_EQ(out.main, 2);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{5, 6, 8, 7, 0}));
  EXPECT_EQ(out.parent, (std::vector<int32_t>{-1, 0, 0, -1, 3}));
  // The side budget bounds what branches add.
  ASSERT_TRUE(d.propose(context, {2, 1}, &out).is_ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{5, 6, 8}));
}

TEST(DraftLength, DraftsWhenWideRowsAreCheapAndStopsWhenTheyAreNot) {
  DraftLength cheap(8);
  EXPECT_EQ(cheap.next(), 0);  // a one-token pass is measured first
  cheap.record(0, 0, 0.100, 0);
  EXPECT_EQ(cheap.next(), 4);  // then a wider one
  for (int i = 0; i < 20; ++i) cheap.record(4, 4, 0.102, 0);
  EXPECT_EQ(cheap.next(), 8);  // streamed weights: a row costs ~nothing, guesses are kept

  DraftLength dear(8);
  dear.record(0, 0, 0.010, 0);
  for (int i = 0; i < 20; ++i) dear.record(4, 0, 0.030, 0);  // every guess refused
  // Off but for one-guess probes, each costing a 5 ms row: one in 50 passes is 1% of 10 ms.
  int drafted = 0;
  for (int i = 0; i < 100; ++i) drafted += dear.next();
  EXPECT_EQ(drafted, 2);

  DraftLength barely(8);  // guesses that would gain under 3% are not worth drafting
  barely.record(0, 0, 0.010, 0);
  for (int i = 0; i < 20; ++i) barely.record(1, 1, 0.0195, 0);
  EXPECT_EQ(barely.next(), 0);
}

TEST(DraftLength, SideGuessesWhereTheyBuyTokensCheaperThanThePass) {
  // Streamed weights: a row costs ~nothing, so side guesses pay even when few are kept.
  DraftLength cheap(8, 4);
  cheap.record(0, 0, 0.100, 0);
  EXPECT_EQ(cheap.side(4), 0);  // nothing measured yet
  for (int i = 0; i < 20; ++i) cheap.record({4, 4, 2, 1, 0.101, 0});
  EXPECT_EQ(cheap.side(cheap.next()), 4);

  // Resident: a row costs a fifth of a pass, and a side guess is seldom kept.
  DraftLength dear(8, 4);
  dear.record(0, 0, 0.010, 0);
  for (int i = 0; i < 20; ++i) dear.record({4, 4, 4, 0, 0.018, 0});
  int offered = 0;
  for (int i = 0; i < 64; ++i) offered += dear.side(dear.next());
  EXPECT_EQ(offered, 4);                    // one-guess probes every kProbeEvery passes
  EXPECT_EQ(DraftLength(8, 0).side(8), 0);  // --spec-side 0: chains
}

// A toy target whose next token is next_of(last token), and a drafter whose main branch
// goes wrong at its second guess while a side branch holds the right tokens.
constexpr int32_t kToyVocab = 50;
int32_t next_of(int32_t t) {
  return (t * 7 + 3) % kToyVocab;
}

class SideBranchDrafter final : public Drafter {
 public:
  Status propose(std::span<const int32_t> context, DraftShape shape, DraftTree* out) override {
    out->clear();
    const int32_t a = next_of(context.back()), b = next_of(a);
    main_ = {a, (b + 1) % kToyVocab};
    out->set_main(main_);
    if (shape.side >= 2) out->child(out->child(0, b, true), next_of(b), true);
    return Status::ok();
  }

 private:
  std::vector<int32_t> main_;
};

TEST(SpeculativePasses, WalksDownASideBranchAndKeepsItsRows) {
  SideBranchDrafter drafter;
  DraftLength length(2, 2);
  SpeculationOptions so;
  so.lookup = true;
  so.max_draft = 2;
  so.max_side = 2;
  so.fixed_length = true;
  std::vector<int32_t> history = {5};
  std::vector<float> plain(kToyVocab), rows;
  std::vector<std::vector<int32_t>> kept_branches;
  const auto one_hot = [](float* row, int32_t t) {
    std::fill(row, row + kToyVocab, 0.0f);
    row[next_of(t)] = 1.0f;
  };
  one_hot(plain.data(), 5);
  SpeculativePasses::Target target;
  target.n_vocab = kToyVocab;
  target.history = &history;
  target.plain = plain.data();
  target.rows = &rows;
  target.feed = [&](std::span<const int32_t> tokens, std::span<const int32_t> parent,
                    int64_t n_rows, float* out) {
    EXPECT_TRUE(parent.empty() || parent.size() == tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i)
      one_hot(n_rows > 0 ? out + i * kToyVocab : plain.data(), tokens[i]);
    history.insert(history.end(), tokens.begin(), tokens.end());
    return Status::ok();
  };
  target.keep = [&](int64_t base, std::span<const int32_t> nodes) {
    EXPECT_EQ(base, static_cast<int64_t>(history.size()) - 5);  // the pass fed 5 tokens
    kept_branches.emplace_back(nodes.begin(), nodes.end());
    return Status::ok();
  };
  SpecStats stats;
  SpeculativePasses passes(&drafter, length, so, target, &stats);
  SamplingParams sp;
  sp.temperature = 0;
  sp.repeat_penalty = 1.0f;
  Sampler sampler(sp, kToyVocab);
  std::vector<int32_t> want = {5};
  for (int i = 0; i < 13; ++i) {  // the prompt's token, then three passes of four
    int kept = -1;
    const int32_t id =
        sampler.sample_draft(passes.logits(), passes.seen(), passes.guesses(), &kept);
    want.push_back(next_of(want.back()));
    ASSERT_EQ(id, want.back());
    if (kept >= 0) {
      passes.kept(kept);
      continue;
    }
    ASSERT_TRUE(passes.settle().is_ok());
    ASSERT_TRUE(passes.next_pass(id, 100, [](int32_t) { return false; }).is_ok());
  }
  ASSERT_TRUE(passes.finish().is_ok());
  EXPECT_EQ(history, want);
  // Each pass: the token, then a (kept), the main branch's wrong guess, b and its child on
  // the side branch (both kept): nodes 0, 1, 3, 4 of the pass.
  EXPECT_EQ(kept_branches.size(), 3u);
  for (const auto& nodes : kept_branches) EXPECT_EQ(nodes, (std::vector<int32_t>{0, 1, 3, 4}));
  EXPECT_EQ(stats.passes, 4);
  EXPECT_EQ(stats.side_drafted, 8);
  EXPECT_EQ(stats.side_accepted, 6);
}

// Counts of n samples of each of the candidates against the probabilities p: chi-square.
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double chi = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * n;
    if (e > 0) chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

TEST(Sampler, DraftedTokensKeepTheTargetDistribution) {
  SamplingParams sp;
  sp.temperature = 0.7f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.repeat_penalty = 1.0f;
  sp.seed = 7;
  const std::array<float, 6> logits = {1.0f, 2.0f, 0.5f, 1.5f, -1.0f, 0.0f};
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(logits[i] / sp.temperature);
  for (double& v : p) v /= sum;
  // 5 degrees of freedom: 20.5 is the 0.999 quantile.
  constexpr double kChi999 = 20.5;
  constexpr int kSamples = 40000;
  // One guess (the likeliest, a middling and an unlikely one), then siblings of a tree.
  const std::vector<std::vector<int32_t>> guesses = {{1}, {2}, {4}, {2, 1}, {4, 0, 3}};
  for (const std::vector<int32_t>& drafts : guesses) {
    Sampler s(sp, static_cast<int64_t>(logits.size()));
    std::vector<int> counts(logits.size(), 0);
    int kept = 0;
    for (int i = 0; i < kSamples; ++i) {
      std::array<float, 6> l = logits;
      int which = -1;
      const int32_t id = s.sample_draft(l.data(), {}, drafts, &which);
      ASSERT_TRUE(which < 0 || id == drafts[static_cast<size_t>(which)]);
      kept += which >= 0 ? 1 : 0;
      counts[static_cast<size_t>(id)]++;
    }
    EXPECT_LT(chi_square(counts, p, kSamples), kChi999) << "guesses " << drafts[0] << "...";
    // A guess is kept about as often as the target draws it.
    double p_any = 0;
    for (const int32_t d : drafts) p_any += p[static_cast<size_t>(d)];
    EXPECT_NEAR(static_cast<double>(kept) / kSamples, p_any, 0.01);
  }
}

TEST(Sampler, GreedyKeepsTheGuessOnlyWhenItIsTheArgmax) {
  SamplingParams sp;
  sp.temperature = 0;
  sp.repeat_penalty = 1.0f;
  Sampler s(sp, 4);
  float logits[4] = {0.0f, 3.0f, 1.0f, 2.0f};
  int kept = -1;
  const std::vector<int32_t> right = {1}, wrong = {3}, siblings = {3, 1};
  EXPECT_EQ(s.sample_draft(logits, {}, right, &kept), 1);
  EXPECT_EQ(kept, 0);
  EXPECT_EQ(s.sample_draft(logits, {}, wrong, &kept), 1);
  EXPECT_EQ(kept, -1);
  EXPECT_EQ(s.sample_draft(logits, {}, siblings, &kept), 1);
  EXPECT_EQ(kept, 1);
}

const std::string kModels = std::string(HYPURA_SOURCE_DIR) + "/test-models/";

std::unique_ptr<Engine> load_or_skip(const std::string& file, const std::string& draft = "") {
  EngineOptions o;
  o.model_path = kModels + file;
  o.draft_model = draft.empty() ? "" : kModels + draft;
  o.n_ctx = 512;
  o.n_threads = 2;
  auto e = Engine::load(o);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

Result<GenerateResult> greedy(Engine& e, const std::string& prompt, SpeculationOptions spec) {
  GenerateOptions o;
  o.max_tokens = 40;
  o.sampling.temperature = 0;
  o.sampling.repeat_penalty = 1.0f;  // the draft's guesses are plain argmaxes
  o.speculation = spec;
  auto tokens = e.tokenize_chat({{"user", prompt}}, ChatOptions{});
  if (!tokens.is_ok()) return tokens.status();
  return e.new_session()->generate(*tokens, o, nullptr);
}

constexpr const char* kSmol = "smollm2-135m-instruct-q4_1.gguf";
constexpr const char* kEditPrompt =
    "Repeat this code exactly:\ndef add(a, b):\n    return a + b\n\n"
    "def sub(a, b):\n    return a - b\n";

TEST(Speculation, GreedyOutputIsTheSameWithLookupAndWithADraftModel) {
  if (!std::filesystem::exists(kModels + kSmol)) GTEST_SKIP() << "scripts/fetch-models.sh";
  // The model as its own draft: every guess it is confident of is kept.
  auto engine = load_or_skip(kSmol, kSmol);
  ASSERT_NE(engine, nullptr);
  auto plain = greedy(*engine, kEditPrompt, {});
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  EXPECT_EQ(plain->spec.drafted, 0);
  EXPECT_EQ(plain->spec.passes, plain->generated_tokens);
  // A fixed number of guesses: under a sanitizer the timings would turn speculation off.
  SpeculationOptions lookup;
  lookup.lookup = true;
  lookup.fixed_length = true;
  SpeculationOptions draft = lookup;
  draft.lookup = false;
  draft.draft_model = true;
  draft.max_draft = 4;
  for (const SpeculationOptions& spec : {lookup, draft}) {
    auto fast = greedy(*engine, kEditPrompt, spec);
    ASSERT_TRUE(fast.is_ok()) << fast.status().message();
    EXPECT_EQ(fast->text, plain->text);
    EXPECT_EQ(fast->generated_tokens, plain->generated_tokens);
    EXPECT_GT(fast->spec.accepted, 0) << (spec.lookup ? "lookup" : "draft");
    EXPECT_LT(fast->spec.passes, plain->spec.passes);
    if (spec.draft_model) {  // its own draft's side guesses are never the argmax
      EXPECT_EQ(fast->spec.accepted, fast->spec.drafted - fast->spec.side_drafted);
      EXPECT_GT(fast->spec.side_drafted, 0);
      EXPECT_EQ(fast->spec.side_accepted, 0);
    }
  }
}

TEST(Speculation, ADraftOfAnotherVocabularyIsRefusedByName) {
  const std::string gemma = "gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(kModels + kSmol) || !std::filesystem::exists(kModels + gemma))
    GTEST_SKIP() << "scripts/fetch-models.sh";
  EngineOptions o;
  o.model_path = kModels + kSmol;
  o.draft_model = kModels + gemma;
  o.n_ctx = 256;
  auto e = Engine::load(o);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("vocabulary differs from the model's at token"),
            std::string::npos)
      << e.status().message();
}

TEST(Speculation, AskingForADraftModelWithoutOneIsAnError) {
  if (!std::filesystem::exists(kModels + kSmol)) GTEST_SKIP() << "scripts/fetch-models.sh";
  auto engine = load_or_skip(kSmol);
  ASSERT_NE(engine, nullptr);
  SpeculationOptions draft;
  draft.draft_model = true;
  auto r = greedy(*engine, "hi", draft);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--draft"), std::string::npos);
}

}  // namespace
}  // namespace hypura::runtime
