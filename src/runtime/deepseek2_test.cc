// deepseek2 end to end on the CPU: the deepseek2-tiny and deepseek2-lite-tiny synth presets
// (both attention variants, sigmoid routing with groups and the score bias, softmax routing
// without renormalisation, shared experts, a leading dense layer, YaRN) give logits that do
// not depend on how a prompt is split into passes, and expert streaming (routed experts
// read on demand into a one-slot cache, with the router's speculative reads) gives
// bit-identical logits to the resident model while the shared experts and the dense layer
// stay resident. The llama.cpp goldens of these presets are in tests/golden/synth.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "experts/expert_provider.h"
#include "gguf/gguf.h"
#include "model/cuda_blocks.h"
#include "model/model.h"
#include "runtime/testing/golden_fixtures.h"
#include "synth/synth.h"
#include "tiers/testing/resident_provider.h"

namespace hypura::runtime {
namespace {

struct Synthesized {
  std::string path;
  gguf::GgufFile file;
  std::shared_ptr<const model::Model> model;
};

// The preset written as Q4_K_M with the golden models' 384-token vocabulary.
Synthesized synthesize(const std::string& preset) {
  Synthesized s;
  s.path = ::testing::TempDir() + "/hypura_" + preset + "_" + std::to_string(getpid()) + ".gguf";
  synth::SynthSpec spec;
  spec.arch = synth::Arch::kDeepseek2;
  spec.shape = synth::preset_shape(synth::find_preset(preset).value(), spec.arch).value();
  spec.vocab_from = golden::kDir + "/llama-f32.gguf";
  auto vocab = synth::load_vocab(spec.vocab_from, 0);
  EXPECT_TRUE(vocab.is_ok()) << vocab.status().message();
  if (!vocab.is_ok()) return s;
  spec.shape.n_vocab = vocab->n_vocab;
  auto valid = synth::validate(spec);
  EXPECT_TRUE(valid.is_ok()) << valid.status().message();
  if (!valid.is_ok()) return s;
  Status st = synth::write_model(*valid, *vocab, s.path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  auto file = gguf::GgufFile::open(s.path);
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  if (!file.is_ok()) return s;
  s.file = std::move(file).value();
  auto model = model::Model::create(s.file);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (model.is_ok()) s.model = model.value();
  return s;
}

class Deepseek2 : public testing::TestWithParam<const char*> {};

TEST_P(Deepseek2, SplitInvariantAndStreamedBitIdentical) {
  Synthesized s = synthesize(GetParam());
  ASSERT_NE(s.model, nullptr);
  const model::HParams& hp = s.model->hparams();
  EXPECT_TRUE(hp.is_mla());
  EXPECT_EQ(hp.kv_per_token(), hp.kv_lora_rank + hp.n_rot);  // the latent cache
  const std::vector<int32_t> tokens = golden::sequence("C");
  auto resident = tiers::ResidentProvider::load(s.file, nullptr);
  ASSERT_TRUE(resident.is_ok()) << resident.status().message();
  std::vector<float> whole, chunked;
  ASSERT_TRUE(golden::forward_logits(s.model, *resident.value(), tokens,
                                     static_cast<int64_t>(tokens.size()), &whole)
                  .is_ok());
  ASSERT_TRUE(golden::forward_logits(s.model, *resident.value(), tokens, 5, &chunked).is_ok());
  EXPECT_EQ(std::memcmp(whole.data(), chunked.data(), whole.size() * sizeof(float)), 0)
      << "a prompt split into passes changed the logits";

  experts::ExpertConfig config;
  config.cache_experts = 1;
  config.speculate = true;
  config.min_confidence = 0.0;
  tiers::MemoryLedger ledger(uint64_t{1} << 34);
  auto created = experts::ExpertProvider::create(s.file, config, ledger, nullptr);
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  std::vector<float> streamed;
  Status st = golden::forward_logits(s.model, *created.value(), tokens, 5, &streamed);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(std::memcmp(streamed.data(), chunked.data(), chunked.size() * sizeof(float)), 0)
      << "expert-streaming logits differ from resident ones";
  EXPECT_GT(created.value()->stats().misses, 0u);
  std::filesystem::remove(s.path);
}

// Past one 512-key segment: decode steps split their segments over the pool and merge
// the partials; the latent cache (values read from the keys' rows) must give the same
// rows as one prompt pass.
TEST(Deepseek2Long, BatchInvariantAcrossKeySegments) {
  Synthesized s = synthesize("deepseek2-tiny");
  ASSERT_NE(s.model, nullptr);
  std::vector<int32_t> tokens(600);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(3 + (i * 37) % 381);
  auto resident = tiers::ResidentProvider::load(s.file, nullptr);
  ASSERT_TRUE(resident.is_ok()) << resident.status().message();
  std::vector<float> whole, stepped;
  ASSERT_TRUE(golden::forward_logits(s.model, *resident.value(), tokens, 512, &whole).is_ok());
  ASSERT_TRUE(golden::forward_logits(s.model, *resident.value(), tokens, 1, &stepped).is_ok());
  EXPECT_EQ(std::memcmp(whole.data(), stepped.data(), whole.size() * sizeof(float)), 0);
  std::filesystem::remove(s.path);
}

// The GPU blocks do not run latent attention yet: a clear refusal, which --device auto
// turns into the CPU (runtime/device_choice.cc) and --device cuda into the error.
TEST(Deepseek2Gpu, RefusedWithTheReason) {
  Synthesized s = synthesize("deepseek2-tiny");
  ASSERT_NE(s.model, nullptr);
  const Status st = model::cuda_supports(s.model->hparams(), s.file);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
#if HYPURA_HAVE_CUDA
  EXPECT_NE(st.message().find("latent attention (deepseek2)"), std::string::npos) << st.message();
#endif
  std::filesystem::remove(s.path);
}

INSTANTIATE_TEST_SUITE_P(Presets, Deepseek2,
                         testing::Values("deepseek2-tiny", "deepseek2-lite-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace hypura::runtime
