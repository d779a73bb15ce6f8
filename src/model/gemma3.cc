// Gemma3: embeddings scaled by sqrt(n_embd) (in Forward), q/k head norms, norms after
// attention and FFN as well as before, GeGLU (tanh GELU), and sliding-window layers.
//
// Layer il is local when il % swa_pattern < swa_pattern - 1: it sees the last n_swa
// positions and rotates with rope_freq_base_swa; global layers see everything and use
// rope_freq_base (with the linear rope scaling, if any). Q is scaled by
// 1/sqrt(query_pre_attn_scalar) before QK^T, which is then not scaled again.
//
//   n   = RMSNorm(x) * attn_norm
//   q   = RoPE(HeadNorm(Wq n) * q_norm) * q_scale,  k = RoPE(HeadNorm(Wk n) * k_norm)
//   x  += RMSNorm(Wo . Attention(q, k, Wv n)) * post_attention_norm
//   n   = RMSNorm(x) * ffn_norm
//   x  += RMSNorm(Wdown . (GELU(Wgate n) * Wup n)) * post_ffw_norm
#include "model/architectures.h"

namespace hypura::model {

Status gemma3_layer(Blocks& b, int64_t il) {
  const HParams& hp = b.hp();
  const bool local = hp.is_swa_layer(il);

  AttnViews a;
  HYPURA_RETURN_IF_ERROR(b.acquire_attention(il, &a));
  b.norm(b.x(), a.norm, b.cur());
  b.project_qkv(a, b.cur());
  b.head_norm(b.q(), hp.n_head, a.q_norm);
  b.head_norm(b.k(), hp.n_head_kv, a.k_norm);
  b.rope_qk(hp.rope_base(il), hp.rope_scale(il));
  b.scale(b.q(), hp.q_width(), hp.q_scale);
  b.attention(il, local, hp.kq_scale);
  b.linear(a.wo, b.attn(), b.cur());
  b.norm(b.cur(), a.post_norm, b.cur());
  b.residual(b.x(), b.cur());

  FfnViews f;
  HYPURA_RETURN_IF_ERROR(b.acquire_ffn(il, &f));
  b.norm(b.x(), f.norm, b.cur());
  b.dense_ffn(f, FfnAct::kGeluTanh, b.cur(), b.cur());
  b.norm(b.cur(), f.post_norm, b.cur());
  b.residual(b.x(), b.cur());
  return Status::ok();
}

}  // namespace hypura::model
