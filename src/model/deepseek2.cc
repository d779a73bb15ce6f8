// DeepSeek-V2 / V3 / R1 and Kimi-K2: multi-head latent attention over a compressed KV cache,
// leading dense layers, then MoE layers with shared experts.
//
//   n    = RMSNorm(x) * attn_norm
//   q    = Wq_b . (RMSNorm(Wq_a n) * q_a_norm)     or Wq n when q_lora_rank is 0
//          per head [q_nope (qk_nope), q_pe (n_rot)]
//   kv   = Wkv_a n = [c (kv_lora_rank), k_pe (n_rot)];  c = RMSNorm(c) * kv_a_norm
//   key  = [c, RoPE(k_pe)]  cached per position (one "kv head" shared by every q head)
//   q'   = per head [Wk_b[h] . q_nope, RoPE(q_pe)]       (q_nope absorbed into the latent)
//   o_h  = Wv_b[h] . softmax(q'_h . key^T * kq_scale) . c  (values: the cached latents)
//   x   += Wo . [o_0 .. o_n_head)
//   n    = RMSNorm(x) * ffn_norm
//   x   += SwiGLU(n)                                  leading dense layers
//       or sum_k w_k * Expert_k(n) + SharedExperts(n)  MoE layers
// kq_scale carries YaRN's magnitude correction squared (hparams.cc).
#include "model/architectures.h"

namespace hypura::model {
namespace {

// Leaves the layer's attention output (before Wo) in b.mla_heads().
void latent_attention(Blocks& b, int64_t il, const AttnViews& a) {
  const HParams& hp = b.hp();
  b.mla_query_key(a);
  b.attention(il, /*swa=*/false, hp.kq_scale);
  b.mla_values(a.wv_b, b.mla_heads());
}

}  // namespace

Status deepseek2_layer(Blocks& b, int64_t il) {
  const HParams& hp = b.hp();
  AttnViews a;
  HYPURA_RETURN_IF_ERROR(b.acquire_attention(il, &a));
  b.norm(b.x(), a.norm, b.cur());
  latent_attention(b, il, a);
  b.linear(a.wo, b.mla_heads(), b.cur());
  b.residual(b.x(), b.cur());

  FfnViews f;
  HYPURA_RETURN_IF_ERROR(b.acquire_ffn(il, &f));
  b.norm(b.x(), f.norm, b.cur());
  if (hp.is_moe_layer(il)) {
    HYPURA_RETURN_IF_ERROR(b.moe_ffn(il, f, b.cur(), b.cur()));  // routed + shared experts
  } else {
    b.dense_ffn(f, FfnAct::kSilu, b.cur(), b.cur());
  }
  b.residual(b.x(), b.cur());
  return Status::ok();
}

}  // namespace hypura::model
