// Tensor role tests: every tensor of every golden model gets a role, plus the names of
// real models that the golden ones do not contain (fused qkv, shared experts, unstacked
// Mixtral experts, llama3 rope_freqs).
#include "model/tensor_role.h"

#include <gtest/gtest.h>

#include <map>

#include "gguf/gguf.h"

namespace hypura::model {
namespace {

const std::string kGolden = HYPURA_GOLDEN_DIR;

struct Case {
  const char* name;
  TensorRole role;
  int layer;
};

void expect_cases(std::string_view arch, std::initializer_list<Case> cases) {
  for (const Case& c : cases) {
    TensorClass got = classify_tensor(c.name, arch);
    EXPECT_EQ(got.role, c.role) << c.name << " -> " << role_name(got.role);
    EXPECT_EQ(got.layer, c.layer) << c.name;
  }
}

TEST(TensorRole, Llama) {
  expect_cases("llama", {
                            {"token_embd.weight", TensorRole::kTokenEmbedding, -1},
                            {"output.weight", TensorRole::kOutput, -1},
                            {"output_norm.weight", TensorRole::kOutputNorm, -1},
                            {"rope_freqs.weight", TensorRole::kRopeFreqs, -1},
                            {"blk.0.attn_norm.weight", TensorRole::kAttnNorm, 0},
                            {"blk.7.attn_q.weight", TensorRole::kAttnQ, 7},
                            {"blk.7.attn_k.weight", TensorRole::kAttnK, 7},
                            {"blk.7.attn_v.weight", TensorRole::kAttnV, 7},
                            {"blk.79.attn_output.weight", TensorRole::kAttnOutput, 79},
                            {"blk.12.ffn_norm.weight", TensorRole::kFfnNorm, 12},
                            {"blk.12.ffn_gate.weight", TensorRole::kFfnGate, 12},
                            {"blk.12.ffn_up.weight", TensorRole::kFfnUp, 12},
                            {"blk.12.ffn_down.weight", TensorRole::kFfnDown, 12},
                            {"blk.3.attn_qkv.weight", TensorRole::kAttnQkv, 3},
                        });
}

TEST(TensorRole, Qwen2Biases) {
  expect_cases("qwen2", {
                            {"blk.1.attn_q.bias", TensorRole::kAttnBias, 1},
                            {"blk.1.attn_k.bias", TensorRole::kAttnBias, 1},
                            {"blk.1.attn_v.bias", TensorRole::kAttnBias, 1},
                            {"blk.1.attn_q.weight", TensorRole::kAttnQ, 1},
                        });
}

TEST(TensorRole, Qwen3AndGemma3Norms) {
  expect_cases("qwen3", {
                            {"blk.0.attn_q_norm.weight", TensorRole::kAttnQNorm, 0},
                            {"blk.0.attn_k_norm.weight", TensorRole::kAttnKNorm, 0},
                        });
  expect_cases("gemma3", {
                             {"blk.5.post_attention_norm.weight", TensorRole::kAttnNorm, 5},
                             {"blk.5.post_ffw_norm.weight", TensorRole::kFfnNorm, 5},
                         });
}

TEST(TensorRole, MoE) {
  expect_cases("llama", {
                            {"blk.2.ffn_gate_inp.weight", TensorRole::kMoeRouter, 2},
                            {"blk.2.ffn_gate_exps.weight", TensorRole::kMoeGateExperts, 2},
                            {"blk.2.ffn_up_exps.weight", TensorRole::kMoeUpExperts, 2},
                            {"blk.2.ffn_down_exps.weight", TensorRole::kMoeDownExperts, 2},
                            // Old Mixtral conversions: one tensor per expert.
                            {"blk.2.ffn_gate.5.weight", TensorRole::kMoeGateExperts, 2},
                            {"blk.2.ffn_up.0.weight", TensorRole::kMoeUpExperts, 2},
                            {"blk.2.ffn_down.7.weight", TensorRole::kMoeDownExperts, 2},
                        });
  expect_cases("qwen2moe", {
                               {"blk.4.ffn_gate_shexp.weight", TensorRole::kSharedExpert, 4},
                               {"blk.4.ffn_up_shexp.weight", TensorRole::kSharedExpert, 4},
                               {"blk.4.ffn_down_shexp.weight", TensorRole::kSharedExpert, 4},
                               {"blk.4.ffn_gate_inp_shexp.weight", TensorRole::kSharedExpert, 4},
                           });
}

// gpt-oss: sinks and the o bias are attention; its post_attention_norm is the FFN's input
// norm; expert biases are their own (resident) role, not experts.
TEST(TensorRole, GptOss) {
  expect_cases("gpt-oss", {
                              {"blk.3.attn_sinks.weight", TensorRole::kAttnSinks, 3},
                              {"blk.3.attn_output.bias", TensorRole::kAttnBias, 3},
                              {"blk.3.post_attention_norm.weight", TensorRole::kFfnNorm, 3},
                              {"blk.3.ffn_gate_inp.bias", TensorRole::kMoeRouter, 3},
                              {"blk.3.ffn_gate_exps.bias", TensorRole::kMoeExpertBias, 3},
                              {"blk.3.ffn_up_exps.bias", TensorRole::kMoeExpertBias, 3},
                              {"blk.3.ffn_down_exps.bias", TensorRole::kMoeExpertBias, 3},
                              {"blk.3.ffn_down_exps.weight", TensorRole::kMoeDownExperts, 3},
                          });
  EXPECT_TRUE(is_attention(TensorRole::kAttnSinks));
  EXPECT_FALSE(is_moe_expert(TensorRole::kMoeExpertBias));
}

TEST(TensorRole, UnknownNames) {
  expect_cases("llama", {
                            {"", TensorRole::kOther, -1},
                            {"blk.", TensorRole::kOther, -1},
                            {"blk.x.attn_q.weight", TensorRole::kOther, -1},
                            {"blk.-1.attn_q.weight", TensorRole::kOther, -1},
                            {"blk.99999999999999999999.attn_q.weight", TensorRole::kOther, -1},
                            {"blk.3.something_new.weight", TensorRole::kOther, 3},
                            {"blk.3.ffn_gate.x.weight", TensorRole::kOther, 3},
                            {"token_embd_norm.weight", TensorRole::kOther, -1},
                        });
}

TEST(TensorRole, Groups) {
  EXPECT_TRUE(is_moe_expert(TensorRole::kMoeUpExperts));
  EXPECT_FALSE(is_moe_expert(TensorRole::kMoeRouter));
  EXPECT_TRUE(is_dense_ffn(TensorRole::kFfnDown));
  EXPECT_FALSE(is_dense_ffn(TensorRole::kSharedExpert));
  EXPECT_TRUE(is_attention(TensorRole::kAttnKNorm));
  EXPECT_TRUE(is_attention(TensorRole::kAttnBias));
  EXPECT_FALSE(is_attention(TensorRole::kFfnNorm));
  EXPECT_TRUE(is_norm(TensorRole::kOutputNorm));
  EXPECT_FALSE(is_norm(TensorRole::kOutput));
  EXPECT_STREQ(role_name(TensorRole::kMoeUpExperts), "moe_experts_up");
}

// Every tensor in every golden model has a known role, and each layer of a model has
// the same multiset of roles.
TEST(TensorRole, GoldenModelsFullyClassified) {
  for (const char* model : {"llama", "qwen2", "qwen3", "gemma3", "mixtral", "qwen3moe"}) {
    SCOPED_TRACE(model);
    auto f = gguf::GgufFile::open(kGolden + "/" + model + "-q4_k_m.gguf");
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    std::map<int, std::map<TensorRole, int>> per_layer;
    for (const gguf::TensorInfo& t : f->tensors()) {
      TensorClass c = classify_tensor(t.name, f->architecture());
      EXPECT_NE(c.role, TensorRole::kOther) << t.name;
      per_layer[c.layer][c.role]++;
    }
    ASSERT_EQ(per_layer.size(), 3u);  // top level + 2 layers
    EXPECT_EQ(per_layer[0], per_layer[1]);
    bool moe = std::string_view(model) == "mixtral" || std::string_view(model) == "qwen3moe";
    EXPECT_EQ(per_layer[0].count(TensorRole::kMoeRouter), moe ? 1u : 0u);
    EXPECT_EQ(per_layer[0].count(TensorRole::kFfnUp), moe ? 0u : 1u);
  }
}

}  // namespace
}  // namespace hypura::model
