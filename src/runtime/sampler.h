// Sampler: picks the next token from a row of logits.
//
// Greedy when temperature <= 0 (argmax, lowest id on ties). Otherwise llama.cpp's default
// chain, in its order: repetition penalty over the last repeat_last_n tokens (positive
// logits divided, negative multiplied), top-k, top-p (nucleus), min-p (relative to the
// most probable token), temperature, then a draw from the remaining distribution with a
// 64-bit Mersenne Twister seeded by SamplingParams::seed (same seed, same tokens).
// Logits of -inf (tokens a grammar masked) are never drawn: the chain runs over the rest.
//
// Thread-safety: one instance per generation stream. Buffers are sized at construction;
// sample() does not allocate.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "runtime/session.h"

namespace hypura::runtime {

class Sampler {
 public:
  Sampler(const SamplingParams& params, int64_t n_vocab);

  // logits: (n_vocab), modified in place by the penalty. history: tokens so far (prompt
  // and generated), the last repeat_last_n of which are penalised.
  int32_t sample(float* logits, std::span<const int32_t> history);
  // As sample(), with guesses (distinct tokens): greedy keeps the one that is the argmax;
  // sampling tries them in order, keeping each with the probability the chain gives it
  // among the tokens not refused yet, and otherwise draws from the rest (speculative
  // rejection sampling for proposals of one token each: the result is distributed as
  // sample()'s). *kept: the index of the guess kept, or -1.
  int32_t sample_draft(float* logits, std::span<const int32_t> history,
                       std::span<const int32_t> drafts, int* kept);

  static int32_t argmax(const float* logits, int64_t n_vocab);

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  void penalize(float* logits, std::span<const int32_t> history);
  void truncate();  // top-k, top-p, min-p on candidates_ (sorted by logit, descending)
  double uniform(double scale) { return static_cast<double>(rng_() >> 11) * 0x1.0p-53 * scale; }

  SamplingParams params_;
  int64_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;  // (n_vocab)
  std::vector<float> probs_;           // (n_vocab)
  std::vector<uint8_t> seen_;          // (n_vocab) marks of penalised tokens
};

}  // namespace hypura::runtime
