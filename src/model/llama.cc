// Llama (Llama 2/3, Mistral) and Mixtral-style MoE:
//
//   n   = RMSNorm(x) * attn_norm
//   x  += Wo . Attention(RoPE(Wq n), RoPE(Wk n), Wv n)       normal (pairwise) RoPE
//   n   = RMSNorm(x) * ffn_norm
//   x  += Wdown . (SiLU(Wgate n) * Wup n)                     dense
//      or sum_k w_k * Expert_k(n)                             top-k softmax router, renormalised
#include "model/architectures.h"

namespace hypura::model {

Status llama_layer(Blocks& b, int64_t il) {
  const HParams& hp = b.hp();
  AttnViews a;
  HYPURA_RETURN_IF_ERROR(b.acquire_attention(il, &a));
  b.norm(b.x(), a.norm, b.cur());
  b.project_qkv(a, b.cur());
  b.rope_qk(hp.rope_freq_base, hp.rope_freq_scale);
  b.attention(il, /*swa=*/false, hp.kq_scale);
  b.linear(a.wo, b.attn(), b.cur());
  b.residual(b.x(), b.cur());

  return residual_ffn(b, il);
}

Status residual_ffn(Blocks& b, int64_t il) {
  FfnViews f;
  HYPURA_RETURN_IF_ERROR(b.acquire_ffn(il, &f));
  b.norm(b.x(), f.norm, b.cur());
  if (b.hp().is_moe_layer(il)) {
    HYPURA_RETURN_IF_ERROR(b.moe_ffn(il, f, b.cur(), b.cur()));
  } else {
    b.dense_ffn(f, FfnAct::kSilu, b.cur(), b.cur());
  }
  b.residual(b.x(), b.cur());
  return Status::ok();
}

LayerFn layer_fn(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return llama_layer;
    case Arch::kQwen2:
      return qwen2_layer;
    case Arch::kQwen3:
      return qwen3_layer;
    case Arch::kQwen3Moe:
      return qwen3_layer;
    case Arch::kGemma3:
      return gemma3_layer;
    case Arch::kDeepseek2:
      return deepseek2_layer;
    case Arch::kGptOss:
      return gpt_oss_layer;
    case Arch::kGlm4Moe:
      return glm4moe_layer;
  }
  return nullptr;
}

}  // namespace hypura::model
