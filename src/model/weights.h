// The tensor directory of a model: which GGUF tensor plays which part in each layer.
//
// Built once at load from tensor names, checked against the hyperparameters (every
// required tensor present with the expected shape), so the forward pass never looks up a
// name or meets a surprise. Ids index GgufFile::tensors() and are handed to the
// WeightProvider; kNone marks tensors an architecture or a file does not have.
//
// Thread-safety: immutable after build_weight_map().
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "model/hparams.h"

namespace hypura::gguf {
class GgufFile;
}

namespace hypura::model {

using TensorId = int32_t;
inline constexpr TensorId kNone = -1;

struct LayerWeights {
  TensorId attn_norm = kNone;                   // (n_embd)
  TensorId wq = kNone;                          // (n_embd) -> (n_head * head_dim)
  TensorId wk = kNone;                          // (n_embd) -> (n_head_kv * head_dim)
  TensorId wv = kNone;                          // (n_embd) -> (n_head_kv * head_dim_v)
  TensorId wo = kNone;                          // (n_head * head_dim_v) -> (n_embd)
  TensorId bq = kNone, bk = kNone, bv = kNone;  // qwen2 biases, shapes as the rows above
  TensorId q_norm = kNone;                      // (head_dim), applied per head (qwen3, gemma3)
  TensorId k_norm = kNone;                      // (head_dim)
  TensorId post_attn_norm = kNone;              // (n_embd), gemma3
  // Multi-head latent attention (deepseek2); wq is attn_q when q_lora_rank == 0.
  TensorId wq_a = kNone;           // (n_embd) -> (q_lora_rank)
  TensorId q_a_norm = kNone;       // (q_lora_rank)
  TensorId wq_b = kNone;           // (q_lora_rank) -> (n_head * head_dim_mla)
  TensorId wkv_a = kNone;          // attn_kv_a_mqa: (n_embd) -> (kv_lora_rank + n_rot)
  TensorId kv_a_norm = kNone;      // (kv_lora_rank)
  TensorId wk_b = kNone;           // per head (qk_nope) -> (kv_lora_rank): absorbs q_nope
  TensorId wv_b = kNone;           // per head (kv_lora_rank) -> (head_dim_v_mla)
  TensorId bo = kNone;             // (n_embd) attn_output bias, gpt-oss
  TensorId attn_sinks = kNone;     // (n_head) per-head softmax sink logit, gpt-oss
  TensorId ffn_norm = kNone;       // (n_embd)
  TensorId post_ffn_norm = kNone;  // (n_embd), gemma3
  // Dense FFN.
  TensorId ffn_gate = kNone;  // (n_embd) -> (n_ff)
  TensorId ffn_up = kNone;    // (n_embd) -> (n_ff)
  TensorId ffn_down = kNone;  // (n_ff) -> (n_embd)
  // MoE FFN.
  TensorId ffn_router = kNone;       // ffn_gate_inp: (n_embd) -> (n_expert)
  TensorId ffn_gate_exps = kNone;    // (n_embd, n_ff_expert, n_expert)
  TensorId ffn_up_exps = kNone;      // (n_embd, n_ff_expert, n_expert)
  TensorId ffn_down_exps = kNone;    // (n_ff_expert, n_embd, n_expert)
  TensorId ffn_exp_probs_b = kNone;  // exp_probs_b: (n_expert) selection bias, optional
  // Shared expert (n_expert_shared > 0): a dense SwiGLU FFN of n_ff_shexp() on every row.
  TensorId ffn_gate_shexp = kNone;  // (n_embd) -> (n_ff_shexp)
  TensorId ffn_up_shexp = kNone;    // (n_embd) -> (n_ff_shexp)
  TensorId ffn_down_shexp = kNone;  // (n_ff_shexp) -> (n_embd)
  // gpt-oss's biases: the router's logits and each expert's gate/up/down outputs. Small
  // F32 tensors kept resident (TensorRole::kMoeExpertBias), not streamed with the experts.
  TensorId ffn_router_b = kNone;     // (n_expert)
  TensorId ffn_gate_exps_b = kNone;  // (n_ff_expert, n_expert)
  TensorId ffn_up_exps_b = kNone;    // (n_ff_expert, n_expert)
  TensorId ffn_down_exps_b = kNone;  // (n_embd, n_expert)
};

struct WeightMap {
  TensorId token_embd = kNone;   // (n_embd, n_vocab)
  TensorId output_norm = kNone;  // (n_embd)
  TensorId output = kNone;       // (n_embd, n_vocab); token_embd when tied
  TensorId rope_freqs = kNone;   // (n_rot / 2) llama3 frequency factors, optional
  std::vector<LayerWeights> layers;
};

// The tensor ids of layer il (-1: the tensors outside the layer stack), absent ones left
// out, each once (a tied output is the embedding).
std::vector<TensorId> layer_tensor_ids(const WeightMap& w, int64_t il);

// Finds every tensor the architecture needs. Missing tensors and wrong shapes return an
// error naming the tensor.
Result<WeightMap> build_weight_map(const gguf::GgufFile& file, const HParams& hp);

}  // namespace hypura::model
