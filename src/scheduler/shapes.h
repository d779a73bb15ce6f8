// Synthetic ModelTensors from a model's shape: plans (and planner tests) for models that
// are not on disk, such as the original's three models on its M1 Max rig, or a
// 1T-parameter MoE on a 32 GiB machine.
//
// Tensor names, shapes and the quant mix follow llama.cpp's conventions (the Q4_K_M and
// Q5_K_M rules of llama-quantize: attn_v and ffn_down get Q6_K in the "more bits" layers,
// the output head Q6_K, 8-expert models Q8_0 attn_k/attn_v), so sizes land within a few
// percent of the published files; tests check them against the published sizes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "scheduler/model_tensors.h"

namespace hypura::scheduler {

// kMxfp4Moe: llama-quantize's MXFP4_MOE (gpt-oss): stacked experts MXFP4, other matrices Q8_0.
enum class QuantMix { kF16, kQ8_0, kQ4_K_M, kQ5_K_M, kMxfp4Moe };

struct ShapeSpec {
  std::string name;
  std::string architecture = "llama";
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // 0: n_embd / n_head
  int64_t n_ff = 0;      // dense FFN width (also the MoE model's dense layers)
  int64_t n_expert = 0;  // 0: dense model
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;        // one expert's FFN width
  int64_t n_ff_shexp = 0;      // shared expert width, 0: none
  int64_t n_dense_layers = 0;  // leading layers with a dense FFN in a MoE model
  // Multi-head latent attention (DeepSeek-V3, Kimi K2); 0 keeps ordinary GQA.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_rope_dim = 0, qk_nope_dim = 0, v_head_dim = 0;
  bool qkv_bias = false;         // qwen2
  bool tied_embeddings = false;  // no separate output tensor
  QuantMix mix = QuantMix::kQ4_K_M;
};

ModelTensors synthetic_model(const ShapeSpec& spec);

// SPEC.md section 5 and issue 5's shapes.
ShapeSpec qwen25_14b_q4km();     // 8.4 GiB, dense
ShapeSpec mixtral_8x7b_q5km();   // ~30.9 GiB, 8 experts (2 used)
ShapeSpec mixtral_8x7b_q4km();   // ~26 GB: the "mixtral-8x7b" synthetic preset
ShapeSpec moe_preset_q4km();     // 4.0 GiB: the "moe" synthetic preset, 8 experts (2 used)
ShapeSpec llama33_70b_q4km();    // 39.6 GiB, dense
ShapeSpec qwen3_30b_a3b_q4km();  // 128 experts (8 used)
ShapeSpec kimi_k2_q4km();    // ~1T parameters: 61 layers, 384 experts of 2048 (8 used) + 1 shared
ShapeSpec llama3_8b_q4km();  // the "8b" synthetic preset, 4.6 GiB

}  // namespace hypura::scheduler
