// One transformer layer per architecture, each in its own file that reads like the math
// (llama.cc, qwen2.cc, qwen3.cc, gemma3.cc, deepseek2.cc, gpt_oss.cc, glm4moe.cc), composed of
// the shared blocks in blocks.h.
//
// A layer function reads the residual stream Blocks::x() of the batch, acquires its
// weights from the provider, and leaves the updated stream in x(). The caller releases
// the layer afterwards.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "model/blocks.h"
#include "model/hparams.h"

namespace hypura::model {

using LayerFn = Status (*)(Blocks& b, int64_t il);

Status llama_layer(Blocks& b, int64_t il);      // llama, mistral, mixtral-style MoE
Status qwen2_layer(Blocks& b, int64_t il);      // qkv biases
Status qwen3_layer(Blocks& b, int64_t il);      // q/k norms; qwen3moe when n_expert > 0
Status gemma3_layer(Blocks& b, int64_t il);     // GeGLU, pre/post norms, sliding window
Status deepseek2_layer(Blocks& b, int64_t il);  // latent attention, shared experts
Status gpt_oss_layer(Blocks& b, int64_t il);    // sinks, biases, alternating SWA, clamped SwiGLU
Status glm4moe_layer(Blocks& b, int64_t il);    // biases, partial RoPE, shared expert, dense lead

LayerFn layer_fn(Arch arch);

// Pieces several architectures share (llama.cc):
// x += FFN(RMSNorm(x) * ffn_norm): SwiGLU, or the MoE block on the model's MoE layers.
Status residual_ffn(Blocks& b, int64_t il);

}  // namespace hypura::model
