// Hyperparameters of a transformer, read from GGUF metadata ("<arch>.<key>").
//
// One struct for every supported architecture; fields an architecture does not use keep
// their defaults. Values follow llama.cpp's reading of the same keys so the forward pass
// computes what llama.cpp computes (head_dim from attention.key_length when present,
// gemma3's sliding-window defaults, llama3 rope factors...).
//
// Thread-safety: plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hypura::gguf {
class GgufFile;
}

namespace hypura::model {

enum class Arch { kLlama, kQwen2, kQwen3, kGemma3, kQwen3Moe, kDeepseek2, kGptOss, kGlm4Moe };

// A gated FFN's activation of gate (times up): SiLU, tanh GELU, or gpt-oss's clamped
// SwiGLU (gate clamped above, up clamped both ways and shifted by 1, sigmoid(alpha x)).
enum class FfnAct { kSilu, kGeluTanh, kSwigluOai };

// How a MoE router's logits become expert weights (model/routing.h).
enum class ExpertGating {
  kSoftmax,        // softmax over all experts, top-k of the probabilities
  kSigmoid,        // sigmoid per expert, top-k of the probabilities
  kSoftmaxWeight,  // top-k of the raw logits, softmax over the k chosen
};

// "llama, qwen2, qwen3, gemma3, qwen3moe, glm4moe": for error messages.
const char* supported_architectures();
const char* arch_name(Arch arch);

struct HParams {
  Arch arch = Arch::kLlama;
  std::string arch_name;  // general.architecture as stored
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;        // layers the forward pass runs (block_count less n_layer_nextn)
  int64_t n_layer_nextn = 0;  // nextn_predict_layers: MTP layers stored after them, unused
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;    // per-head size of q and k (attention.key_length)
  int64_t head_dim_v = 0;  // per-head size of v (attention.value_length)
  int64_t n_ff = 0;        // dense FFN width
  int64_t n_expert = 0;    // 0: dense model
  int64_t n_expert_used = 0;
  int64_t n_ff_expert = 0;  // per-expert FFN width
  // MoE routing and its shared pieces (model/routing.h); the defaults are mixtral's.
  ExpertGating expert_gating = ExpertGating::kSoftmax;  // expert_gating_func
  bool expert_weights_norm = true;                      // weights divided by their sum
  float expert_weights_scale = 1.0f;                    // weights multiplied by this
  int64_t n_expert_groups = 0;        // expert_group_count; > 1: group-limited top-k
  int64_t n_group_used = 0;           // expert_group_used_count
  int64_t n_expert_shared = 0;        // expert_shared_count: an always-on expert of this many
                                      // n_ff_expert widths (ffn_*_shexp), added to the routed sum
  int64_t n_layer_dense_lead = 0;     // leading_dense_block_count: layers with a dense FFN
  FfnAct expert_act = FfnAct::kSilu;  // the routed experts' activation
  float rms_eps = 1e-5f;

  // RoPE.
  int64_t n_rot = 0;       // rotated dims per head (rope.dimension_count)
  bool rope_neox = false;  // rotate (i, i + n_rot/2) instead of (2i, 2i+1)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;         // 1 / rope.scaling.factor for "linear" scaling
  float rope_freq_base_swa = 10000.0f;  // gemma3 local layers
  float rope_freq_scale_swa = 1.0f;

  // Sliding-window attention (gemma3, gpt-oss): a query at p sees key j when p - j < n_swa.
  int64_t n_swa = 0;        // 0: no SWA layers
  int64_t swa_pattern = 0;  // layer il is local when il % pattern < pattern - 1
  float embd_scale = 1.0f;  // multiplies token embeddings (gemma: sqrt(n_embd))
  float q_scale = 0.0f;     // applied to Q before QK^T; 0: use kq_scale instead
  float kq_scale = 0.0f;    // softmax scale of QK^T

  // YaRN RoPE scaling (rope.scaling.type "yarn"), as llama.cpp's context derives it:
  // ext_factor 1 mixes interpolated and original frequencies between the correction dims
  // of beta_fast / beta_slow; attn_factor scales the rotated values.
  float yarn_ext_factor = 0.0f;  // 0: plain (or linear) RoPE
  float yarn_attn_factor = 1.0f;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  float yarn_log_mul = 0.0f;  // deepseek2: mscale_all_dim (rope.scaling.yarn_log_multiplier / 0.1)
  int64_t n_ctx_orig_yarn = 0;

  // Multi-head latent attention (deepseek2). Attention runs as MQA over the latent: head_dim
  // = kv_lora_rank + n_rot (the cached key: normalized latent, then rotated k_pe),
  // head_dim_v = kv_lora_rank (the cached value is the latent itself, the key's prefix).
  int64_t q_lora_rank = 0;     // 0: attn_q straight from n_embd (V2-Lite)
  int64_t kv_lora_rank = 0;    // 0: not MLA
  int64_t head_dim_mla = 0;    // per-head q/k size before absorption: qk_nope + qk_rope
  int64_t head_dim_v_mla = 0;  // per-head v size after attn_v_b

  bool is_swa_layer(int64_t il) const {
    return n_swa > 0 && swa_pattern > 0 && (il % swa_pattern) < swa_pattern - 1;
  }
  // Whether layer il's FFN is a mixture of experts (else dense, n_ff wide).
  bool is_moe_layer(int64_t il) const { return n_expert > 0 && il >= n_layer_dense_lead; }
  int64_t n_ff_shexp() const { return n_ff_expert * n_expert_shared; }
  // Layer il's RoPE frequencies: local (sliding-window) layers have their own.
  float rope_base(int64_t il) const {
    return is_swa_layer(il) ? rope_freq_base_swa : rope_freq_base;
  }
  float rope_scale(int64_t il) const {
    return is_swa_layer(il) ? rope_freq_scale_swa : rope_freq_scale;
  }
  int64_t q_width() const { return n_head * head_dim; }       // rows of attn_q
  int64_t k_width() const { return n_head_kv * head_dim; }    // rows of attn_k
  int64_t v_width() const { return n_head_kv * head_dim_v; }  // rows of attn_v
  bool is_mla() const { return kv_lora_rank > 0; }
  int64_t qk_nope() const { return head_dim_mla - n_rot; }  // MLA: un-rotated q/k dims
  // Values one position stores in the KV cache, per layer: MLA keeps the latent and k_pe
  // once (its value is the key's prefix); others K and V of every kv head.
  int64_t kv_per_token() const { return is_mla() ? head_dim : k_width() + v_width(); }
};

// Reads the hyperparameters of the model's architecture; unknown architectures and
// missing or inconsistent keys return an error naming the key.
Result<HParams> read_hparams(const gguf::GgufFile& file);

}  // namespace hypura::model
