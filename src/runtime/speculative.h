// Speculative decoding (docs/SPECULATIVE.md): a drafter guesses the tokens that follow,
// one forward pass of the target model computes the logits of every guessed position, and
// the sampler keeps the guesses it would have drawn itself. A pass over streamed weights
// costs about one read of them whatever its width, so every accepted guess is a token for
// free; over resident weights a wider pass costs compute, and DraftLength weighs it.
//
// Exactness: greedy decoding keeps a guess only when it is the argmax of its row, and the
// CPU's rows are bit-identical to one-token steps (batch invariance, model.h), so the
// output is the same token for token. Sampling keeps a guess with the probability the
// target gives it and otherwise draws from the rest (Sampler::sample_draft), so the output
// distribution is the target's.
//
// Thread-safety: one instance per generation stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "runtime/session.h"

namespace hypura::runtime {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max tokens that may follow context (the tokens so far, prompt and output), into
  // *out (cleared first); fewer, or none, when the drafter has no good guess.
  virtual Status propose(std::span<const int32_t> context, int max, std::vector<int32_t>* out) = 0;
};

// Prompt lookup: the tokens that followed the latest earlier occurrence of the context's
// last n tokens (the longest n from kMaxNgram down to kMinNgram that occurs). Free, and
// right where the output repeats its input: code edits, quotes, summaries, RAG.
class LookupDrafter final : public Drafter {
 public:
  static constexpr int kMaxNgram = 4;
  static constexpr int kMinNgram = 2;
  Status propose(std::span<const int32_t> context, int max, std::vector<int32_t>* out) override;
};

// A small model with the target's vocabulary, in its own session: greedy tokens while it
// is confident of them (its top probability at least kMinConfidence).
class ModelDrafter final : public Drafter {
 public:
  static constexpr float kMinConfidence = 0.3f;
  ModelDrafter(Session& session, int64_t n_vocab) : session_(session), n_vocab_(n_vocab) {}
  Status propose(std::span<const int32_t> context, int max, std::vector<int32_t>* out) override;

 private:
  Session& session_;  // the draft model's, kept across generations (its cache is reused)
  int64_t n_vocab_;
  std::vector<int32_t> feed_;
  std::vector<float> logits_;
};

// How many tokens to draft for the next pass: the k (0..max) with the most expected tokens
// per second, (1 - a^(k+1)) / (1 - a) tokens for plain + k * (row + draft) seconds, where
// a is the measured chance that a guess is kept given the one before it was, plain the
// time of a one-token pass, row the extra time of each verified row and draft the time
// the drafter takes per guess. A k > 0 must promise kMinGain times plain decoding's rate.
// Where none does it drafts nothing, except for a one-guess probe that keeps the estimates
// current, spaced so that probes cost about kProbeShare of the time (every kProbeEvery
// passes at the closest: a free drafter's probe costs one verified row).
class DraftLength {
 public:
  static constexpr double kMinGain = 1.03;
  static constexpr double kProbeShare = 0.01;
  static constexpr int kProbeEvery = 16;
  explicit DraftLength(int max) : max_(max) {}
  int max() const { return max_; }
  int next();
  // A pass fed `drafted` guesses, kept `accepted`, took pass_s; drafting took draft_s.
  void record(int drafted, int accepted, double pass_s, double draft_s);
  double acceptance() const { return (kept_ + 1.0) / (tried_ + 1.5); }

 private:
  // Per guess, from sums over the recent passes (a ratio of sums: a pass that drafted
  // little but paid the drafter's fixed costs weighs as much as it cost).
  double row_s() const { return extra_s_ / guesses_; }
  double draft_s() const { return draft_sum_s_ / guesses_; }

  int max_;
  double kept_ = 0, tried_ = 0;  // guesses kept and judged, decaying
  double plain_s_ = 0;           // a one-token pass (0: not measured yet)
  // Decaying sums over passes: guesses fed, the time passes took beyond plain_s_, and the
  // drafter's time (also on passes where it found nothing).
  double guesses_ = 0, extra_s_ = 0, draft_sum_s_ = 0;
  int since_probe_ = 0;
};

// The passes of one generation (LocalSession::generate): each feeds the last sampled token
// and the guesses the drafter makes after it, so the row that follows a kept guess is
// already computed. It knows which row of the pass in flight the next token is sampled
// from, drops the cache rows of guesses that were not kept, and tells DraftLength what each
// pass cost and kept. Without a drafter every pass is the one token.
class SpeculativePasses {
 public:
  // Feeds tokens after the session's history; n_rows > 0 puts the logits of the last
  // n_rows tokens in rows (n_rows, n_vocab), else the last token's in the plain buffer.
  using Feed = std::function<Status(std::span<const int32_t> tokens, int64_t n_rows, float* rows)>;
  // history: the session's tokens (the pass's guesses join it as they are fed); plain: the
  // logits of a one-token pass; rows: the buffer a pass's rows go to (grown as needed).
  SpeculativePasses(Drafter* drafter, DraftLength& length, const SpeculationOptions& options,
                    int64_t n_vocab, std::vector<int32_t>& history, float* plain,
                    std::vector<float>& rows, Feed feed);

  // The logits the next token is sampled from, the tokens they follow, and the pass's
  // guess for that position (-1: none).
  float* logits();
  std::span<const int32_t> seen() const;
  int32_t guess() const { return row_ + 1 < n_rows_ ? guesses_[static_cast<size_t>(row_)] : -1; }
  // The sampled token was the guess: its cache row and the next row's logits exist.
  void kept() { ++row_; }
  // The sampled token was not a guess: the rest of the pass is dropped and the pass is
  // recorded (stats->accepted must count the guesses kept so far).
  void settle(const SpecStats& stats);
  // Feeds `id` and up to `room` guesses after it (stop: the tokenizer's end test, nothing
  // follows such a guess); counts the pass and the guesses in *stats.
  Status next_pass(int32_t id, int64_t room, const std::function<bool(int32_t)>& stop,
                   SpecStats* stats);
  // At the end: the history keeps only the tokens sampled.
  void finish();

 private:
  struct Pass {  // the last pass, recorded once its rows are sampled
    int guessed = 0;
    int64_t kept_before = 0;
    double pass_s = 0, draft_s = 0;
  };
  Drafter* drafter_;
  DraftLength& length_;
  const SpeculationOptions& options_;
  int64_t n_vocab_;
  std::vector<int32_t>& history_;
  float* plain_;
  std::vector<float>& rows_;
  Feed feed_;
  std::vector<int32_t> fed_, guesses_;
  int64_t base_ = 0, n_rows_ = 0, row_ = 0;  // the pass's first position, its rows, the next
  std::optional<Pass> last_;
};

// The drafter a generation asks for (SpeculationOptions), or null for none. draft_session:
// the draft model's session, null when the engine has no draft model (an error if asked).
Result<std::unique_ptr<Drafter>> make_drafter(const SpeculationOptions& options,
                                              Session* draft_session, int64_t n_vocab);

}  // namespace hypura::runtime
