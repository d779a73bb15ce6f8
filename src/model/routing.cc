#include "model/routing.h"

#include <algorithm>
#include <cmath>

#include "compute/compute.h"

namespace hypura::model {
namespace {

constexpr int64_t kMaxExpertGroups = 64;
// ggml clamps the weights' sum to the smallest normal fp16 before dividing.
constexpr float kMinWeightSum = 6.103515625e-5f;

// Every expert outside the n_group_used best groups gets -inf; a group's score is the sum
// of its two best scores.
void mask_groups(const HParams& hp, float* scores) {
  const int64_t n_groups = hp.n_expert_groups, per = hp.n_expert / n_groups;
  float group_score[kMaxExpertGroups] = {};
  int32_t chosen[kMaxExpertGroups] = {};
  for (int64_t g = 0; g < n_groups; ++g) {
    int32_t best[2];
    compute::top_k(scores + g * per, per, 2, best);
    group_score[g] = scores[g * per + best[0]] + scores[g * per + best[1]];
  }
  compute::top_k(group_score, n_groups, hp.n_group_used, chosen);
  for (int64_t g = 0; g < n_groups; ++g) {
    if (std::find(chosen, chosen + hp.n_group_used, g) != chosen + hp.n_group_used) continue;
    std::fill(scores + g * per, scores + (g + 1) * per, -INFINITY);
  }
}

}  // namespace

void route_row(const HParams& hp, float* logits, const float* bias, float* scratch,
               int32_t* selected, float* weights) {
  const int64_t ne = hp.n_expert, k = hp.n_expert_used;
  switch (hp.expert_gating) {
    case ExpertGating::kSoftmax:
      compute::softmax(logits, ne);
      break;
    case ExpertGating::kSigmoid:
      for (int64_t i = 0; i < ne; ++i) logits[i] = 1.0f / (1.0f + std::exp(-logits[i]));
      break;
    case ExpertGating::kSoftmaxWeight:
      break;  // the softmax comes after the selection, over the chosen k
  }
  const float* scores = logits;
  if (bias != nullptr || hp.n_expert_groups > 1) {
    for (int64_t i = 0; i < ne; ++i) scratch[i] = bias != nullptr ? logits[i] + bias[i] : logits[i];
    if (hp.n_expert_groups > 1) mask_groups(hp, scratch);
    scores = scratch;
  }
  compute::top_k(scores, ne, k, selected);
  for (int64_t slot = 0; slot < k; ++slot) weights[slot] = logits[selected[slot]];
  if (hp.expert_gating == ExpertGating::kSoftmaxWeight) compute::softmax(weights, k);
  if (hp.expert_weights_norm) {
    float sum = 0.0f;
    for (int64_t slot = 0; slot < k; ++slot) sum += weights[slot];
    sum = std::max(sum, kMinWeightSum);
    for (int64_t slot = 0; slot < k; ++slot) weights[slot] /= sum;
  }
  if (hp.expert_weights_scale != 1.0f) {
    for (int64_t slot = 0; slot < k; ++slot) weights[slot] *= hp.expert_weights_scale;
  }
}

Status check_routing(const HParams& hp) {
  if (hp.n_expert == 0) return Status::ok();
  const std::string key = hp.arch_name + ".expert_group";
  if (hp.n_expert_groups > 1) {
    const int64_t g = hp.n_expert_groups;
    if (g > kMaxExpertGroups || hp.n_expert % g != 0 || hp.n_expert / g < 2) {
      return corrupt(key + "_count " + std::to_string(g) + " does not divide " +
                     std::to_string(hp.n_expert) + " experts into groups of 2 or more (at most " +
                     std::to_string(kMaxExpertGroups) + " groups)");
    }
    if (hp.n_group_used < 1 || hp.n_group_used > g ||
        hp.n_expert_used > hp.n_group_used * (hp.n_expert / g)) {
      return corrupt(key + "_used_count " + std::to_string(hp.n_group_used) + " must be in 1.." +
                     std::to_string(g) + " and its groups must hold the " +
                     std::to_string(hp.n_expert_used) + " used experts");
    }
  }
  if (!(hp.expert_weights_scale > 0.0f) || !std::isfinite(hp.expert_weights_scale)) {
    return corrupt(hp.arch_name + ".expert_weights_scale must be a positive number");
  }
  return Status::ok();
}

}  // namespace hypura::model
