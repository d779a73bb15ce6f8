// Qwen3 and Qwen3-MoE: per-head RMS norms on q and k before NeoX RoPE; head_dim comes
// from attention.key_length (n_head * head_dim may differ from n_embd).
//
//   n   = RMSNorm(x) * attn_norm
//   q   = RoPE(HeadNorm(Wq n) * q_norm),  k = RoPE(HeadNorm(Wk n) * k_norm)
//   x  += Wo . Attention(q, k, Wv n)
//   n   = RMSNorm(x) * ffn_norm
//   x  += Wdown . (SiLU(Wgate n) * Wup n)                    qwen3
//      or sum_k w_k * Expert_k(n)                            qwen3moe: softmax top-k, renormalised
#include "model/architectures.h"

namespace hypura::model {

Status qwen3_layer(Blocks& b, int64_t il) {
  const HParams& hp = b.hp();
  AttnViews a;
  HYPURA_RETURN_IF_ERROR(b.acquire_attention(il, &a));
  b.norm(b.x(), a.norm, b.cur());
  b.project_qkv(a, b.cur());
  b.head_norm(b.q(), hp.n_head, a.q_norm);
  b.head_norm(b.k(), hp.n_head_kv, a.k_norm);
  b.rope_qk(hp.rope_freq_base, hp.rope_freq_scale);
  b.attention(il, /*swa=*/false, hp.kq_scale);
  b.linear(a.wo, b.attn(), b.cur());
  b.residual(b.x(), b.cur());

  return residual_ffn(b, il);
}

}  // namespace hypura::model
