// GLM-4.5 / 4.5-Air / 4.6 (glm4moe): q/k/v biases, per-head q/k norms where the file has
// them, NeoX RoPE on the first n_rot dims of each head only (partial rotary), leading
// dense layers, then MoE layers with sigmoid routing, a selection bias and a shared
// expert. The NextN (MTP) layers stored after the model's own are not run (hparams.h).
//
//   n   = RMSNorm(x) * attn_norm
//   q   = RoPE(HeadNorm(Wq n + bq) * q_norm),  k = RoPE(HeadNorm(Wk n + bk) * k_norm)
//   x  += Wo . Attention(q, k, Wv n + bv)
//   n   = RMSNorm(x) * post_attention_norm
//   x  += Wdown . (SiLU(Wgate n) * Wup n)                       layers < leading_dense_block_count
//      or sum_k w_k * Expert_k(n) + SharedExpert(n)             sigmoid + exp_probs_b top-k
#include "model/architectures.h"

namespace hypura::model {

Status glm4moe_layer(Blocks& b, int64_t il) {
  const HParams& hp = b.hp();
  AttnViews a;
  HYPURA_RETURN_IF_ERROR(b.acquire_attention(il, &a));
  b.norm(b.x(), a.norm, b.cur());
  b.project_qkv(a, b.cur());
  b.add_qkv_biases(a);
  if (a.q_norm.data != nullptr) b.head_norm(b.q(), hp.n_head, a.q_norm);
  if (a.k_norm.data != nullptr) b.head_norm(b.k(), hp.n_head_kv, a.k_norm);
  b.rope_qk(hp.rope_freq_base, hp.rope_freq_scale);
  b.attention(il, /*swa=*/false, hp.kq_scale);
  b.linear(a.wo, b.attn(), b.cur());
  b.residual(b.x(), b.cur());

  return residual_ffn(b, il);
}

}  // namespace hypura::model
