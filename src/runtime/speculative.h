// Speculative decoding (docs/SPECULATIVE.md): a drafter guesses the tokens that follow,
// one forward pass of the target model computes the logits of every guessed position, and
// the sampler keeps the guesses it would have drawn itself. A pass over streamed weights
// costs about one read of them whatever its width, so every accepted guess is a token for
// free; over resident weights a wider pass costs compute, and DraftLength weighs it.
//
// Guesses form a tree: a main branch (a chain), and side branches where the drafter had
// second choices (other continuations of the same n-gram, the draft model's
// runners-up). One pass verifies the whole tree (model::SeqRows's tree rows); the tokens
// sampled walk down it while a child holds them, and the kept branch's cache rows move to
// their positions (KvCache::keep_branch), a few rows, never the cache.
//
// Exactness: greedy decoding keeps a guess only when it is the argmax of its row, and a
// pass's rows are bit-identical to one-token steps (batch invariance, model.h; on the GPU
// for up to 15 guesses a pass; a tree row attends exactly as its branch decoded alone),
// so the output is the same token for token. Sampling tries a row's guesses in turn,
// keeping each with the probability the target gives it among the tokens not refused
// yet, and otherwise draws from the rest (Sampler::sample_draft), so the output
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

// A pass's guesses: node i is tokens[i], the token after node parent[i], or after the
// context when that is -1. Parents come before their children, and a node's children hold
// distinct tokens. Nodes 0..main-1 are the main branch, each the child of the one before.
struct DraftTree {
  std::vector<int32_t> tokens, parent;
  int main = 0;

  size_t size() const { return tokens.size(); }
  int side() const { return static_cast<int>(tokens.size()) - main; }
  void clear();
  // The child of `parent` holding token: the existing one, or a new node (-1 when a new
  // one is needed and !room).
  int32_t child(int32_t parent, int32_t token, bool room);
  // Appends tokens as the main branch. REQUIRES: empty.
  void set_main(std::span<const int32_t> chain);
};

// How many guesses a pass may take: `depth` on the main branch, `side` off it.
struct DraftShape {
  int depth = 0;
  int side = 0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Guesses for the tokens after context (the tokens so far, prompt and output) into *out
  // (cleared first), within shape; fewer, or none, when the drafter has no good guess.
  virtual Status propose(std::span<const int32_t> context, DraftShape shape, DraftTree* out) = 0;
};

// Prompt lookup: the tokens that followed the latest earlier occurrence of the context's
// last n tokens (the longest n from kMaxNgram down to kMinNgram that occurs) are the main
// branch; what followed earlier occurrences (up to kMaxBranches in all, latest and longest
// n first) branches off it where it differs. Free, and right where the output repeats its
// input: code edits, quotes, summaries, RAG.
class LookupDrafter final : public Drafter {
 public:
  static constexpr int kMaxNgram = 4;
  static constexpr int kMinNgram = 2;
  static constexpr int kMaxBranches = 8;
  Status propose(std::span<const int32_t> context, DraftShape shape, DraftTree* out) override;
};

// A small model with the target's vocabulary, in its own session: greedy tokens while it
// is confident of them (its top probability at least kMinConfidence) are the main branch;
// its other tokens of probability at least kMinSide after a main node (the first refused
// one's included) branch off as leaves, the likeliest first.
class ModelDrafter final : public Drafter {
 public:
  static constexpr float kMinConfidence = 0.3f;
  static constexpr float kMinSide = 0.1f;
  static constexpr int kChoices = 3;  // tokens of each row considered
  ModelDrafter(Session& session, int64_t n_vocab) : session_(session), n_vocab_(n_vocab) {}
  Status propose(std::span<const int32_t> context, DraftShape shape, DraftTree* out) override;

 private:
  struct Leaf {
    int32_t parent, token;
    float p;
  };
  Session& session_;  // the draft model's, kept across generations (its cache is reused)
  int64_t n_vocab_;
  std::vector<int32_t> feed_, chain_;
  std::vector<float> logits_;
  std::vector<Leaf> leaves_;
};

// How many tokens to draft for the next pass: the k (0..max) with the most expected tokens
// per second, (1 - a^(k+1)) / (1 - a) tokens for plain + k * (row + draft) seconds, where
// a is the measured chance that a guess is kept given the one before it was, plain the
// time of a one-token pass, row the extra time of each verified row and draft the time
// the drafter takes per guess. A k > 0 must promise kMinGain times plain decoding's rate.
// Where none does it drafts nothing, except for a one-guess probe that keeps the estimates
// current, spaced so that probes cost about kProbeShare of the time (every kProbeEvery
// passes at the closest: a free drafter's probe costs one verified row).
//
// Side guesses (off the main branch) are offered, up to max_side, where the measured share
// of them kept (each a token more) buys tokens cheaper than the pass's own rate: where a
// wider pass costs little (streamed weights) or they are often right; else one every
// kProbeEvery passes keeps that share measured.
class DraftLength {
 public:
  static constexpr double kMinGain = 1.03;
  static constexpr double kProbeShare = 0.01;
  static constexpr int kProbeEvery = 16;
  explicit DraftLength(int max, int max_side = 0) : max_(max), max_side_(max_side) {}
  int max() const { return max_; }
  int max_side() const { return max_side_; }
  int next();
  // The side guesses for a pass of `depth` main guesses (next()'s).
  int side(int depth);
  // What a pass verified and kept: main and side guesses fed, main guesses kept (the kept
  // branch's start on the main branch) and side ones; the pass took pass_s, drafting draft_s.
  struct Pass {
    int main = 0, side = 0, kept_main = 0, kept_side = 0;
    double pass_s = 0, draft_s = 0;
  };
  void record(const Pass& p);
  // A chain's pass: `drafted` guesses, `accepted` kept.
  void record(int drafted, int accepted, double pass_s, double draft_s) {
    record(Pass{drafted, 0, accepted, 0, pass_s, draft_s});
  }
  double acceptance() const { return (kept_ + 1.0) / (tried_ + 1.5); }
  double side_acceptance() const { return (side_kept_ + 0.25) / (side_tried_ + 1.0); }

 private:
  // Per guess, from sums over the recent passes (a ratio of sums: a pass that drafted
  // little but paid the drafter's fixed costs weighs as much as it cost).
  double row_s() const { return extra_s_ / guesses_; }
  double draft_s() const { return draft_sum_s_ / guesses_; }
  double expected_tokens(int k) const;  // 1 + a + ... + a^k

  int max_, max_side_;
  double kept_ = 0, tried_ = 0;  // main guesses kept and judged, decaying
  double side_kept_ = 0, side_tried_ = 0;
  double plain_s_ = 0;  // a one-token pass (0: not measured yet)
  // Decaying sums over passes: guesses fed, the time passes took beyond plain_s_, and the
  // drafter's time (also on passes where it found nothing).
  double guesses_ = 0, extra_s_ = 0, draft_sum_s_ = 0;
  int since_probe_ = 0, since_side_probe_ = 0;
};

// The passes of one generation (LocalSession::generate): each feeds the last sampled token
// and the guesses the drafter makes after it, so the row that follows a kept guess is
// already computed. It knows which row of the pass in flight the next token is sampled
// from, drops the cache rows of guesses that were not kept (moving a kept side branch's
// rows to their positions), counts the passes in the generation's SpecStats and tells
// DraftLength what each pass cost and kept. Without a drafter every pass is the one token.
class SpeculativePasses {
 public:
  // Feeds tokens after the session's history; n_rows > 0 puts the logits of the last
  // n_rows tokens in rows (n_rows, n_vocab), else the last token's in the plain buffer.
  // parent: a tree's parents (model::SeqRows), empty for tokens that follow each other.
  using Feed = std::function<Status(std::span<const int32_t> tokens,
                                    std::span<const int32_t> parent, int64_t n_rows, float* rows)>;
  // Moves a kept branch's cache rows (KvCache::keep_branch).
  using KeepBranch = std::function<Status(int64_t base, std::span<const int32_t> nodes)>;
  struct Target {
    int64_t n_vocab = 0;
    std::vector<int32_t>* history = nullptr;  // the session's tokens; a pass's nodes join it
    float* plain = nullptr;                   // the logits of a one-token pass
    std::vector<float>* rows = nullptr;       // a pass's rows (grown as needed)
    Feed feed;
    KeepBranch keep;
  };
  SpeculativePasses(Drafter* drafter, DraftLength& length, const SpeculationOptions& options,
                    Target target, SpecStats* stats);

  // The logits the next token is sampled from, the tokens they follow, and the pass's
  // guesses for that position (none: empty).
  float* logits();
  std::span<const int32_t> seen() const;
  std::span<const int32_t> guesses() const { return child_tokens_; }
  // The sampled token was guesses()[i]: its cache row and the next row's logits exist.
  void kept(int i);
  // The sampled token was not a guess: the rest of the pass is dropped and the pass is
  // recorded. Fails only where the kept branch's rows could not move (a device error).
  Status settle();
  // Feeds `id` and up to `room` guesses after it (stop: the tokenizer's end test, nothing
  // follows such a guess).
  Status next_pass(int32_t id, int64_t room, const std::function<bool(int32_t)>& stop);
  // At the end: the history and the cache keep only the tokens sampled.
  Status finish();

 private:
  void drop_after_ends(const std::function<bool(int32_t)>& stop);
  void find_children();

  struct Pass {  // the last pass, recorded once its rows are sampled
    int main = 0, side = 0;
    double pass_s = 0, draft_s = 0;
  };
  Drafter* drafter_;
  DraftLength& length_;
  const SpeculationOptions& options_;
  Target t_;
  SpecStats* stats_;
  DraftTree tree_, pruned_;                // the drafter's guesses; drop_after_ends's scratch
  std::vector<int32_t> index_;             // drop_after_ends's: a node's index in pruned_
  std::vector<int32_t> fed_, fed_parent_;  // the pass: the token, then the tree's nodes
  std::vector<int32_t> path_;              // the nodes kept so far (fed_ indices), from 0
  std::vector<int32_t> child_tokens_, child_nodes_;  // the current node's children
  int64_t base_ = 0, n_rows_ = 0;  // the pass's first position and its rows (0: plain)
  std::optional<Pass> last_;
};

// The drafter a generation asks for (SpeculationOptions), or null for none. draft_session:
// the draft model's session, null when the engine has no draft model (an error if asked).
Result<std::unique_ptr<Drafter>> make_drafter(const SpeculationOptions& options,
                                              Session* draft_session, int64_t n_vocab);

}  // namespace hypura::runtime
