// glm4moe end to end on the glm4moe-tiny synth preset (F32): the NextN layer stored after
// the model's three is neither run nor planned; routed experts streamed through the
// expert cache (one slot, and with speculative reads) give the resident logits bit for
// bit, while the dense lead layer, the shared experts and the router bias stay resident.
#include <gtest/gtest.h>

#include <cstring>

#include "experts/expert_provider.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/tensor_role.h"
#include "runtime/testing/golden_fixtures.h"
#include "scheduler/model_tensors.h"
#include "synth/synth.h"
#include "tiers/testing/resident_provider.h"

namespace hypura::runtime {
namespace {

golden::Model write_tiny() {
  golden::Model m;
  auto preset = synth::find_preset("glm4moe-tiny");
  EXPECT_TRUE(preset.is_ok());
  synth::SynthSpec spec;
  spec.arch = synth::Arch::kGlm4Moe;
  spec.shape = preset->shape;
  spec.mix = synth::QuantMix::kF32;
  spec.vocab_from = golden::kDir + "/llama-f32.gguf";
  auto vocab = synth::load_vocab(spec.vocab_from, 0);
  EXPECT_TRUE(vocab.is_ok()) << vocab.status().message();
  spec.shape.n_vocab = vocab->n_vocab;
  auto valid = synth::validate(spec);
  EXPECT_TRUE(valid.is_ok()) << valid.status().message();
  // One file per process: ctest runs this file's tests in parallel processes.
  const std::string path = golden::process_temp_dir() + "/glm4moe-tiny-f32.gguf";
  EXPECT_TRUE(synth::write_model(*valid, *vocab, path).is_ok());
  auto file = gguf::GgufFile::open(path);
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  m.file = std::move(file).value();
  auto model = model::Model::create(m.file);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (model.is_ok()) m.model = model.value();
  return m;
}

TEST(Glm4Moe, NextNLayerIsNeitherRunNorPlanned) {
  golden::Model m = write_tiny();
  ASSERT_NE(m.model, nullptr);
  const model::HParams& hp = m.model->hparams();
  EXPECT_EQ(hp.n_layer, 3);
  EXPECT_EQ(hp.n_layer_nextn, 1);
  EXPECT_EQ(hp.expert_gating, model::ExpertGating::kSigmoid);
  EXPECT_EQ(hp.n_rot, 32);
  EXPECT_EQ(hp.n_layer_dense_lead, 1);
  EXPECT_EQ(hp.n_expert_shared, 1);
  EXPECT_EQ(m.model->weights().layers.size(), 3u);
  EXPECT_NE(m.file.find_tensor("blk.3.nextn.eh_proj.weight"), nullptr);
  auto tensors = scheduler::model_tensors_from_gguf(m.file);
  ASSERT_TRUE(tensors.is_ok()) << tensors.status().message();
  EXPECT_EQ(tensors->n_layer, 3);
  for (const auto& t : tensors->tensors) EXPECT_LT(t.layer, 3) << t.name;
}

TEST(Glm4Moe, StreamedExpertsGiveTheResidentLogits) {
  golden::Model m = write_tiny();
  ASSERT_NE(m.model, nullptr);
  const std::vector<int32_t> tokens = golden::sequence("C");
  auto resident = tiers::ResidentProvider::load(m.file, nullptr);
  ASSERT_TRUE(resident.is_ok()) << resident.status().message();
  std::vector<float> want;
  ASSERT_TRUE(golden::forward_logits(m.model, *resident.value(), tokens, 5, &want).is_ok());
  for (bool speculate : {false, true}) {
    experts::ExpertConfig config;
    config.cache_experts = 1;
    config.speculate = speculate;
    config.min_confidence = 0.0;
    // What TieredWeights leaves out: the NextN layer's tensors.
    config.absent.assign(m.file.tensors().size(), false);
    for (size_t i = 0; i < m.file.tensors().size(); ++i) {
      const auto c = model::classify_tensor(m.file.tensors()[i].name, "glm4moe");
      config.absent[i] = c.layer >= m.model->hparams().n_layer;
    }
    tiers::MemoryLedger ledger(0);
    auto ep = experts::ExpertProvider::create(m.file, config, ledger, nullptr);
    ASSERT_TRUE(ep.is_ok()) << ep.status().message();
    EXPECT_EQ((*ep)->n_layer(), 3);
    std::vector<float> got;
    Status st = golden::forward_logits(m.model, **ep, tokens, 5, &got);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << "speculate " << speculate;
    EXPECT_GT((*ep)->stats().misses, 0u);
  }
}

}  // namespace
}  // namespace hypura::runtime
