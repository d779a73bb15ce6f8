// gpt-oss (OpenAI's open-weight MoE): q/k/v/o biases, NeoX RoPE with YaRN scaling,
// attention sinks, sliding-window layers alternating with full ones (even layers local),
// and a MoE whose router has a bias, picks the top-k logits and softmaxes only those,
// with biased experts and a clamped SwiGLU.
//
//   n   = RMSNorm(x) * attn_norm
//   x  += Wo . Attention(RoPE(Wq n + bq), RoPE(Wk n + bk), Wv n + bv; sinks) + bo
//   n   = RMSNorm(x) * post_attention_norm
//   x  += sum_k softmax(top-k logits)_k * (Wdown_k . SwiGLU_oai(Wgate_k n + bg_k, Wup_k n + bu_k)
//                                          + bd_k)
#include "model/architectures.h"

namespace hypura::model {

Status gpt_oss_layer(Blocks& b, int64_t il) {
  const HParams& hp = b.hp();
  const bool local = hp.is_swa_layer(il);

  AttnViews a;
  HYPURA_RETURN_IF_ERROR(b.acquire_attention(il, &a));
  b.norm(b.x(), a.norm, b.cur());
  b.project_qkv(a, b.cur());
  b.add_qkv_biases(a);
  b.rope_qk(hp.rope_base(il), hp.rope_scale(il));
  b.attention(il, local, hp.kq_scale, a.sinks);
  b.linear(a.wo, b.attn(), b.cur());
  b.add_bias(b.cur(), a.bo);
  b.residual(b.x(), b.cur());

  FfnViews f;
  HYPURA_RETURN_IF_ERROR(b.acquire_ffn(il, &f));
  b.norm(b.x(), f.norm, b.cur());
  HYPURA_RETURN_IF_ERROR(b.moe_ffn(il, f, b.cur(), b.cur()));
  b.residual(b.x(), b.cur());
  return Status::ok();
}

}  // namespace hypura::model
