#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

namespace hypura::runtime {

Sampler::Sampler(const SamplingParams& params, int64_t n_vocab)
    : params_(params),
      n_vocab_(n_vocab),
      rng_(params.seed),
      candidates_(static_cast<size_t>(n_vocab)),
      probs_(static_cast<size_t>(n_vocab)),
      seen_(static_cast<size_t>(n_vocab)) {}

// Two passes: the largest value, kept in 16 running maxima that the compiler holds in
// vector registers (one comparison chain through every index does not vectorize), then
// its first index. The same answer as "the first i with logits[i] > every earlier one":
// NaNs never win, and a NaN in front makes it id 0.
int32_t Sampler::argmax(const float* logits, int64_t n_vocab) {
  constexpr int kLanes = 16;
  float lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, logits[0]);
  int64_t i = 0;
  for (; i + kLanes <= n_vocab; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      lane_max[l] = logits[i + l] > lane_max[l] ? logits[i + l] : lane_max[l];
    }
  }
  float best = logits[0];
  for (float m : lane_max) best = m > best ? m : best;
  for (; i < n_vocab; ++i) best = logits[i] > best ? logits[i] : best;
  for (int64_t j = 0; j < n_vocab; ++j) {
    if (logits[j] == best) return static_cast<int32_t>(j);
  }
  return 0;  // logits[0] is NaN
}

void Sampler::penalize(float* logits, std::span<const int32_t> history) {
  if (params_.repeat_penalty == 1.0f || params_.repeat_last_n == 0) return;
  const size_t n = params_.repeat_last_n < 0
                       ? history.size()
                       : std::min(history.size(), static_cast<size_t>(params_.repeat_last_n));
  const auto recent = history.subspan(history.size() - n);
  // Each distinct token is penalised once, however often it occurred.
  for (int32_t id : recent) {
    if (id < 0 || id >= n_vocab_ || seen_[id]) continue;
    seen_[id] = 1;
    float& l = logits[id];
    l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
  }
  for (int32_t id : recent) {
    if (id >= 0 && id < n_vocab_) seen_[id] = 0;
  }
}

void Sampler::truncate() {
  size_t n = candidates_.size();
  if (params_.top_k > 0) n = std::min(n, static_cast<size_t>(params_.top_k));
  // Probabilities at temperature 1 decide top-p and min-p, as in llama.cpp's chain.
  const float max_logit = candidates_[0].logit;
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    probs_[i] = std::exp(candidates_[i].logit - max_logit);
    sum += probs_[i];
  }
  if (params_.top_p < 1.0f) {
    float cum = 0.0f;
    for (size_t i = 0; i < n; ++i) {
      cum += probs_[i] / sum;
      if (cum >= params_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    size_t keep = 1;  // probs_[0] is the maximum (exp(0) = 1)
    while (keep < n && probs_[keep] >= params_.min_p) ++keep;
    n = keep;
  }
  candidates_.resize(n);
}

int32_t Sampler::sample(float* logits, std::span<const int32_t> history) {
  int kept = -1;
  return sample_draft(logits, history, {}, &kept);
}

int32_t Sampler::sample_draft(float* logits, std::span<const int32_t> history,
                              std::span<const int32_t> drafts, int* kept) {
  *kept = -1;
  penalize(logits, history);
  if (params_.temperature <= 0.0f) {
    const int32_t id = argmax(logits, n_vocab_);
    const auto it = std::find(drafts.begin(), drafts.end(), id);
    if (it != drafts.end()) *kept = static_cast<int>(it - drafts.begin());
    return id;
  }
  candidates_.resize(static_cast<size_t>(n_vocab_));
  for (int64_t i = 0; i < n_vocab_; ++i) candidates_[i] = {static_cast<int32_t>(i), logits[i]};
  const auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  const size_t k = params_.top_k > 0
                       ? std::min(candidates_.size(), static_cast<size_t>(params_.top_k))
                       : candidates_.size();
  std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(), by_logit);
  candidates_.resize(k);
  // Tokens a grammar masked (-inf) are never drawn, even by rounding in the last bucket.
  while (candidates_.size() > 1 && candidates_.back().logit == -INFINITY) candidates_.pop_back();
  truncate();
  const float max_logit = candidates_[0].logit;
  float sum = 0.0f;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    probs_[i] = std::exp((candidates_[i].logit - max_logit) / params_.temperature);
    sum += probs_[i];
  }
  for (size_t d = 0; d < drafts.size(); ++d) {
    const auto it = std::find_if(candidates_.begin(), candidates_.end(),
                                 [&](const Candidate& c) { return c.id == drafts[d]; });
    if (it == candidates_.end()) continue;
    float& p = probs_[static_cast<size_t>(it - candidates_.begin())];
    if (p <= 0.0f) continue;
    // Kept with probability p / sum; else refused: the rest renormalised without it.
    if (uniform(sum) < p || sum - p <= 0.0f) {
      *kept = static_cast<int>(d);
      return drafts[d];
    }
    sum -= p;
    p = 0.0f;
  }
  // Uniform in [0, sum) from 53 random bits: portable, unlike std::uniform_real_distribution.
  const double u = uniform(sum);
  double cum = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cum += probs_[i];
    if (u < cum) return candidates_[i].id;
  }
  for (size_t i = candidates_.size(); i-- > 0;) {  // rounding past the end: the last drawable
    if (probs_[i] > 0.0f) return candidates_[i].id;
  }
  return candidates_.back().id;
}

}  // namespace hypura::runtime
