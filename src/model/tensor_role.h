// Tensor roles: what each tensor of a model is for, from its name and architecture.
//
// The planner places tensors by role (attention and norms are touched by every token,
// MoE experts only when routed), inspect reports bytes by role, and the streaming
// providers decide what to stream by role. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace hypura::model {

enum class TensorRole {
  kTokenEmbedding,  // token_embd
  kOutput,          // output (the LM head)
  kOutputNorm,      // output_norm
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnQkv,
  kAttnOutput,
  kAttnNorm,  // attn_norm, post_attention_norm (gemma3)
  kAttnQNorm,
  kAttnKNorm,
  kAttnBias,   // q/k/v/o biases (qwen2, gpt-oss)
  kAttnSinks,  // attn_sinks: a per-head logit in the softmax's denominator (gpt-oss)
  kFfnNorm,    // ffn_norm, post_ffw_norm (gemma3)
  kFfnGate,
  kFfnUp,
  kFfnDown,    // dense FFN
  kMoeRouter,  // ffn_gate_inp
  kMoeGateExperts,
  kMoeUpExperts,
  kMoeDownExperts,  // ffn_*_exps (stacked experts)
  kMoeExpertBias,   // ffn_*_exps.bias: every expert's bias rows, small and kept resident
  kSharedExpert,    // ffn_*_shexp and its gate
  kRopeFreqs,       // rope_freqs (llama3 scaling factors)
  kOther,
};

struct TensorClass {
  TensorRole role = TensorRole::kOther;
  int layer = -1;  // blk.N index, or -1 for tensors outside the layer stack
};

// Classifies a tensor by its GGUF name ("blk.3.ffn_up.weight") for an architecture.
TensorClass classify_tensor(std::string_view name, std::string_view architecture);

const char* role_name(TensorRole role);  // "attn_q", "moe_experts_up", ...

// Broad groups the planner and inspect report by.
bool is_moe_expert(TensorRole role);  // the three *_exps roles
bool is_dense_ffn(TensorRole role);   // gate/up/down of a dense FFN
bool is_attention(TensorRole role);   // q/k/v/qkv/o and their norms and biases
bool is_norm(TensorRole role);

}  // namespace hypura::model
