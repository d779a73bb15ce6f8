// Qwen2 (Qwen 2 / 2.5): Llama with biases on the q/k/v projections and NeoX RoPE.
//
//   n   = RMSNorm(x) * attn_norm
//   x  += Wo . Attention(RoPE(Wq n + bq), RoPE(Wk n + bk), Wv n + bv)
//   n   = RMSNorm(x) * ffn_norm
//   x  += Wdown . (SiLU(Wgate n) * Wup n)
#include "model/architectures.h"

namespace hypura::model {

Status qwen2_layer(Blocks& b, int64_t il) {
  const HParams& hp = b.hp();
  AttnViews a;
  HYPURA_RETURN_IF_ERROR(b.acquire_attention(il, &a));
  b.norm(b.x(), a.norm, b.cur());
  b.project_qkv(a, b.cur());
  b.add_qkv_biases(a);
  b.rope_qk(hp.rope_freq_base, hp.rope_freq_scale);
  b.attention(il, /*swa=*/false, hp.kq_scale);
  b.linear(a.wo, b.attn(), b.cur());
  b.residual(b.x(), b.cur());
  return residual_ffn(b, il);
}

}  // namespace hypura::model
