// route_row() against a direct reference of each routing variant on random router logits;
// the GPU's routing kernel (compute::cuda::moe_route, through the options CudaBlocks derives
// from the hyperparameters) against route_row() for every variant the families use: the
// same experts in the same slots, weights within float rounding (libm's exp against
// CUDA's; CudaRouting.*, skipped without a GPU).
#include "model/routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "compute/compute.h"
#include "model/cuda_blocks.h"

#if HYPURA_HAVE_CUDA
#include "compute/cuda/device.h"
#include "compute/cuda/moe.h"
#endif

namespace hypura::model {
namespace {

// The indices of v's k largest values, largest first, ties to the lower index (a stable
// sort of the indices, as numpy's argsort(-v, kind="stable")[:k]).
std::vector<int32_t> argsort_top(const std::vector<double>& v, int64_t k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

struct Routed {
  std::vector<int32_t> selected;
  std::vector<double> weights;
};

// The reference, in double from the logits: gating, biased scores, group mask, top-k,
// weights from the unbiased probabilities, softmax over the chosen, norm, scale.
Routed reference(const HParams& hp, const std::vector<float>& logits, const float* bias) {
  const auto n = static_cast<size_t>(hp.n_expert);
  std::vector<double> p(n);
  if (hp.expert_gating == ExpertGating::kSoftmax) {
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += std::exp(logits[i] - mx);
    for (size_t i = 0; i < n; ++i) p[i] = std::exp(logits[i] - mx) / sum;
  } else if (hp.expert_gating == ExpertGating::kSigmoid) {
    for (size_t i = 0; i < n; ++i) p[i] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[i])));
  } else {
    for (size_t i = 0; i < n; ++i) p[i] = logits[i];
  }
  std::vector<double> score = p;
  if (bias != nullptr) {
    for (size_t i = 0; i < n; ++i) score[i] += bias[i];
  }
  if (hp.n_expert_groups > 1) {
    const auto per = n / static_cast<size_t>(hp.n_expert_groups);
    std::vector<double> group(static_cast<size_t>(hp.n_expert_groups));
    for (size_t g = 0; g < group.size(); ++g) {
      std::vector<double> members(score.begin() + g * per, score.begin() + (g + 1) * per);
      std::sort(members.rbegin(), members.rend());
      group[g] = members[0] + members[1];
    }
    const std::vector<int32_t> keep = argsort_top(group, hp.n_group_used);
    for (size_t i = 0; i < n; ++i) {
      if (std::find(keep.begin(), keep.end(), static_cast<int32_t>(i / per)) == keep.end())
        score[i] = -INFINITY;
    }
  }
  Routed r;
  r.selected = argsort_top(score, hp.n_expert_used);
  for (int32_t id : r.selected) r.weights.push_back(p[static_cast<size_t>(id)]);
  if (hp.expert_gating == ExpertGating::kSoftmaxWeight) {
    const double mx = *std::max_element(r.weights.begin(), r.weights.end());
    double sum = 0;
    for (double& w : r.weights) sum += (w = std::exp(w - mx));
    for (double& w : r.weights) w /= sum;
  }
  if (hp.expert_weights_norm) {
    const double sum = std::accumulate(r.weights.begin(), r.weights.end(), 0.0);
    for (double& w : r.weights) w /= sum;
  }
  for (double& w : r.weights) w *= hp.expert_weights_scale;
  return r;
}

HParams moe(int64_t n_expert, int64_t n_used) {
  HParams hp;
  hp.arch_name = "test";
  hp.n_expert = n_expert;
  hp.n_expert_used = n_used;
  return hp;
}

// Random rows through route_row() and the reference: the same experts in the same slots,
// weights within float rounding.
void check_random_rows(const HParams& hp, bool with_bias, int rows = 200) {
  ASSERT_TRUE(check_routing(hp).is_ok()) << check_routing(hp).message();
  std::mt19937 rng(7);
  std::normal_distribution<float> logit(0.0f, 2.0f), b(0.0f, 0.5f);
  const auto n = static_cast<size_t>(hp.n_expert), k = static_cast<size_t>(hp.n_expert_used);
  std::vector<float> bias(n), scratch(n), weights(k);
  std::vector<int32_t> selected(k);
  for (int row = 0; row < rows; ++row) {
    std::vector<float> logits(n);
    for (float& v : logits) v = logit(rng);
    for (float& v : bias) v = b(rng);
    const float* bp = with_bias ? bias.data() : nullptr;
    const Routed want = reference(hp, logits, bp);
    std::vector<float> work = logits;
    route_row(hp, work.data(), bp, scratch.data(), selected.data(), weights.data());
    for (size_t s = 0; s < k; ++s) {
      ASSERT_EQ(selected[s], want.selected[s]) << "row " << row << " slot " << s;
      EXPECT_NEAR(weights[s], want.weights[s], 1e-6 * std::max(1.0, std::abs(want.weights[s])))
          << "row " << row << " slot " << s;
    }
  }
}

TEST(Routing, SoftmaxRenormalised) {
  check_random_rows(moe(8, 2), false);
  check_random_rows(moe(128, 8), false);
}

TEST(Routing, SoftmaxWithoutNormAndScaled) {
  HParams hp = moe(64, 6);
  hp.expert_weights_norm = false;
  hp.expert_weights_scale = 16.0f;
  check_random_rows(hp, false);
}

TEST(Routing, SigmoidWithBiasNormScale) {
  HParams hp = moe(128, 8);
  hp.expert_gating = ExpertGating::kSigmoid;
  hp.expert_weights_scale = 2.5f;
  check_random_rows(hp, true);
  hp.expert_weights_norm = false;
  check_random_rows(hp, true);
}

TEST(Routing, SigmoidGroupLimited) {
  HParams hp = moe(256, 8);  // deepseek-v3's: 8 groups, 4 used
  hp.expert_gating = ExpertGating::kSigmoid;
  hp.n_expert_groups = 8;
  hp.n_group_used = 4;
  hp.expert_weights_scale = 2.5f;
  check_random_rows(hp, true);
  check_random_rows(hp, false);
}

TEST(Routing, SoftmaxGroupLimited) {
  HParams hp = moe(64, 6);  // deepseek-v2's shape of routing: softmax, groups, no norm
  hp.n_expert_groups = 8;
  hp.n_group_used = 3;
  hp.expert_weights_norm = false;
  check_random_rows(hp, false);
}

TEST(Routing, SoftmaxOverTheChosen) {
  HParams hp = moe(32, 4);  // gpt-oss
  hp.expert_gating = ExpertGating::kSoftmaxWeight;
  hp.expert_weights_norm = false;
  check_random_rows(hp, false);
}

// Mixtral / qwen3moe routing is bit for bit what it was before route_row(): softmax, the
// top k, their probabilities divided by their float sum.
TEST(Routing, DefaultIsBitIdenticalToRenormalisedSoftmax) {
  const HParams hp = moe(16, 4);
  std::mt19937 rng(3);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  std::vector<float> scratch(16), weights(4);
  std::vector<int32_t> selected(4), want_sel(4);
  for (int row = 0; row < 100; ++row) {
    std::vector<float> probs(16);
    for (float& v : probs) v = logit(rng);
    if (row % 10 == 0) probs[3] = probs[9];  // a tie: the lower id wins
    std::vector<float> work = probs;
    route_row(hp, work.data(), nullptr, scratch.data(), selected.data(), weights.data());
    compute::softmax(probs.data(), 16);
    compute::top_k(probs.data(), 16, 4, want_sel.data());
    float sum = 0.0f;
    for (int s = 0; s < 4; ++s) sum += probs[want_sel[s]];
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(selected[s], want_sel[s]);
      EXPECT_EQ(weights[s], probs[want_sel[s]] / sum);
    }
  }
}

TEST(Routing, RejectsInconsistentGroups) {
  HParams hp = moe(64, 8);
  hp.n_expert_groups = 6;  // does not divide 64
  hp.n_group_used = 2;
  EXPECT_FALSE(check_routing(hp).is_ok());
  hp.n_expert_groups = 8;
  hp.n_group_used = 1;  // 8 experts per group, 8 used: fits
  EXPECT_TRUE(check_routing(hp).is_ok());
  hp.n_expert_used = 9;
  EXPECT_FALSE(check_routing(hp).is_ok());
  hp.n_expert_used = 8;
  hp.n_group_used = 9;
  EXPECT_FALSE(check_routing(hp).is_ok());
  hp.n_group_used = 2;
  hp.expert_weights_scale = -1.0f;
  EXPECT_FALSE(check_routing(hp).is_ok());
}

#if HYPURA_HAVE_CUDA
namespace cuda = compute::cuda;

cuda::DeviceBuffer upload(const void* src, size_t bytes) {
  auto b = cuda::DeviceBuffer::allocate(bytes);
  EXPECT_TRUE(b.is_ok()) << b.status().message();
  EXPECT_TRUE(cuda::copy_to_device(b->data(), src, bytes).is_ok());
  return std::move(*b);
}

// n_tokens rows of random logits (std `spread`, every 7th row with a tie between two
// experts), an optional router logit bias and selection bias, through both.
void check_gpu_routing(const HParams& hp, bool logit_bias, bool select_bias, float spread = 2.0f,
                       float offset = 0.0f) {
  ASSERT_TRUE(check_routing(hp).is_ok()) << check_routing(hp).message();
  const int64_t n_tok = 37, ne = hp.n_expert, k = hp.n_expert_used;
  std::mt19937 rng(static_cast<uint32_t>(ne * 131 + k));
  std::normal_distribution<float> logit(offset, spread), b(0.0f, 0.5f);
  std::vector<float> logits(n_tok * ne), lbias(ne), sbias(ne);
  for (float& v : logits) v = logit(rng);
  for (float& v : lbias) v = b(rng);
  for (float& v : sbias) v = b(rng);
  for (int64_t t = 0; t < n_tok; t += 7) logits[t * ne + ne - 1] = logits[t * ne + 1];
  // The CPU: the logit bias added as CpuBlocks adds it, then route_row.
  std::vector<int32_t> want_sel(n_tok * k);
  std::vector<float> want_w(n_tok * k), scratch(ne);
  for (int64_t t = 0; t < n_tok; ++t) {
    std::vector<float> row(logits.begin() + t * ne, logits.begin() + (t + 1) * ne);
    if (logit_bias) compute::add(row.data(), lbias.data(), ne);
    route_row(hp, row.data(), select_bias ? sbias.data() : nullptr, scratch.data(),
              want_sel.data() + t * k, want_w.data() + t * k);
  }
  cuda::DeviceBuffer dl = upload(logits.data(), logits.size() * 4);
  cuda::DeviceBuffer dlb = upload(lbias.data(), lbias.size() * 4);
  cuda::DeviceBuffer dsb = upload(sbias.data(), sbias.size() * 4);
  const std::vector<float> poison(n_tok * k, NAN);
  cuda::DeviceBuffer dsel = upload(poison.data(), poison.size() * 4);
  cuda::DeviceBuffer dw = upload(poison.data(), poison.size() * 4);
  auto stream = cuda::Stream::create();
  ASSERT_TRUE(stream.is_ok());
  cuda::moe_route(dl.as<float>(), n_tok, ne, k, dsel.as<int32_t>(), dw.as<float>(),
                  stream->handle(),
                  cuda_route_options(hp, logit_bias ? dlb.as<float>() : nullptr,
                                     select_bias ? dsb.as<float>() : nullptr));
  ASSERT_TRUE(stream->synchronize().is_ok());
  std::vector<int32_t> sel(n_tok * k);
  std::vector<float> w(n_tok * k);
  ASSERT_TRUE(cuda::copy_to_host(sel.data(), dsel.data(), sel.size() * 4).is_ok());
  ASSERT_TRUE(cuda::copy_to_host(w.data(), dw.data(), w.size() * 4).is_ok());
  for (int64_t i = 0; i < n_tok * k; ++i) {
    ASSERT_EQ(sel[i], want_sel[i]) << "token " << i / k << " slot " << i % k;
    EXPECT_NEAR(w[i], want_w[i], 2e-6 * std::max(1.0f, std::abs(want_w[i])))
        << "token " << i / k << " slot " << i % k;
  }
}

class CudaRouting : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_TRUE(cuda::select_device(0).is_ok());
  }
};

TEST_F(CudaRouting, SoftmaxRenormalised) {  // mixtral, qwen3moe
  check_gpu_routing(moe(8, 2), false, false);
  check_gpu_routing(moe(128, 8), false, false);
}

TEST_F(CudaRouting, SoftmaxUnnormalisedScaledGrouped) {  // deepseek-v2
  HParams hp = moe(64, 6);
  hp.expert_weights_norm = false;
  hp.expert_weights_scale = 16.0f;
  check_gpu_routing(hp, false, false);
  hp.n_expert_groups = 8;
  hp.n_group_used = 3;
  check_gpu_routing(hp, false, false);
}

TEST_F(CudaRouting, SigmoidWithSelectionBias) {  // glm4moe
  HParams hp = moe(128, 8);
  hp.expert_gating = ExpertGating::kSigmoid;
  check_gpu_routing(hp, false, true);
  hp.expert_weights_scale = 2.5f;
  check_gpu_routing(hp, false, true);
  hp.expert_weights_norm = false;
  check_gpu_routing(hp, false, true);
  check_gpu_routing(hp, false, false);
}

TEST_F(CudaRouting, SigmoidGroupLimited) {  // deepseek-v3: 8 groups, 4 used
  HParams hp = moe(256, 8);
  hp.expert_gating = ExpertGating::kSigmoid;
  hp.n_expert_groups = 8;
  hp.n_group_used = 4;
  hp.expert_weights_scale = 2.5f;
  check_gpu_routing(hp, false, true);
  check_gpu_routing(hp, false, false);
  hp.n_expert_groups = 64;  // groups of 4, more groups than a warp's lanes
  hp.n_group_used = 40;
  check_gpu_routing(hp, false, true);
}

TEST_F(CudaRouting, TinyWeightsClampTheirSum) {  // sigmoid of very negative logits
  HParams hp = moe(32, 4);
  hp.expert_gating = ExpertGating::kSigmoid;
  check_gpu_routing(hp, false, true, 1.0f, -20.0f);
}

TEST_F(CudaRouting, SoftmaxOverTheChosenWithLogitBias) {  // gpt-oss
  HParams hp = moe(32, 4);
  hp.expert_gating = ExpertGating::kSoftmaxWeight;
  hp.expert_weights_norm = false;
  check_gpu_routing(hp, true, false);
  check_gpu_routing(hp, false, false);
}
#endif

}  // namespace
}  // namespace hypura::model
