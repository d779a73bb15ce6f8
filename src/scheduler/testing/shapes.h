// Synthetic ModelTensors from a model's shape: plans (and planner tests) for models that
// are not on disk, such as the original's three models on its M1 Max rig, or a
// 1T-parameter MoE on a 32 GiB machine.
//
// Tensor names and shapes follow llama.cpp's conventions and each tensor's type is
// llama-quantize's for the mix (synth::mix_type, the rule `hypura synth` writes files
// with), so sizes land within a few percent of the published files; tests check them
// against the published sizes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "scheduler/model_tensors.h"
#include "synth/synth.h"

namespace hypura::scheduler {

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
  synth::QuantMix mix = synth::QuantMix::kQ4_K_M;
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
