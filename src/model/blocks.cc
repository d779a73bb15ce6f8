#include "model/blocks.h"

#include <cassert>

#include "compute/op_profile.h"

namespace hypura::model {
namespace {

// Acquires the non-absent ids among `slots` and fills the matching views.
Status acquire_views(WeightProvider& provider, int64_t il,
                     std::initializer_list<std::pair<TensorId, WeightView*>> slots) {
  constexpr size_t kMax = 24;
  TensorId ids[kMax];
  WeightView views[kMax];
  WeightView* targets[kMax];
  size_t n = 0;
  for (const auto& [id, view] : slots) {
    *view = WeightView{};
    if (id == kNone) continue;
    assert(n < kMax);
    ids[n] = id;
    targets[n] = view;
    ++n;
  }
  HYPURA_RETURN_IF_ERROR(
      provider.acquire(static_cast<int>(il), std::span(ids, n), std::span(views, n)));
  for (size_t i = 0; i < n; ++i) *targets[i] = views[i];
  return Status::ok();
}

}  // namespace

void Blocks::begin(std::span<const SeqRows> seqs, bool logits_only) {
  seqs_.assign(seqs.begin(), seqs.end());
  int64_t row = 0;
  logit_rows_ = 0;
  for (SeqRows& s : seqs_) {
    logit_rows_ += s.n_logits;
    assert(s.n_tokens > 0 && row + s.n_tokens <= max_batch_);
    s.row0 = row;
    for (int64_t t = 0; t < s.n_tokens; ++t)
      row_pos_[static_cast<size_t>(row + t)] = static_cast<int32_t>(s.position(t));
    row += s.n_tokens;
  }
  n_tokens_ = row;
  logits_only_ = logits_only;
}

void Blocks::mla_query_key(const AttnViews& a) {
  float* q_heads = mla_heads();
  const bool q_lora = hp_.q_lora_rank > 0;
  // The q path's first product and Wkv_a read the same rows.
  const WeightView* w[] = {q_lora ? &a.wq_a : &a.wq, &a.wkv_a};
  float* out[] = {q_lora ? mla_lora() : q_heads, k()};
  linear_shared(w, out, 2, cur());
  if (q_lora) {
    norm(mla_lora(), a.q_a_norm, mla_lora());
    linear(a.wq_b, mla_lora(), q_heads);
  }
  mla_kv(a.kv_a_norm);
  mla_absorb_q(q_heads, a.wk_b);
}

Status Blocks::acquire_attention(int64_t il, AttnViews* out) {
  const compute::OpProfile::Scope wait(op_profile(), {"weights wait"});
  const LayerWeights& lw = weights_.layers[il];
  return acquire_views(provider_, il,
                       {{lw.attn_norm, &out->norm},
                        {lw.wq, &out->wq},
                        {lw.wk, &out->wk},
                        {lw.wv, &out->wv},
                        {lw.wo, &out->wo},
                        {lw.bq, &out->bq},
                        {lw.bk, &out->bk},
                        {lw.bv, &out->bv},
                        {lw.q_norm, &out->q_norm},
                        {lw.k_norm, &out->k_norm},
                        {lw.post_attn_norm, &out->post_norm},
                        {lw.wq_a, &out->wq_a},
                        {lw.q_a_norm, &out->q_a_norm},
                        {lw.wq_b, &out->wq_b},
                        {lw.wkv_a, &out->wkv_a},
                        {lw.kv_a_norm, &out->kv_a_norm},
                        {lw.wk_b, &out->wk_b},
                        {lw.wv_b, &out->wv_b},
                        {lw.bo, &out->bo},
                        {lw.attn_sinks, &out->sinks}});
}

Status Blocks::acquire_ffn(int64_t il, FfnViews* out) {
  const compute::OpProfile::Scope wait(op_profile(), {"weights wait"});
  const LayerWeights& lw = weights_.layers[il];
  out->gate_exps = lw.ffn_gate_exps;
  out->up_exps = lw.ffn_up_exps;
  out->down_exps = lw.ffn_down_exps;
  return acquire_views(provider_, il,
                       {{lw.ffn_norm, &out->norm},
                        {lw.post_ffn_norm, &out->post_norm},
                        {lw.ffn_gate, &out->gate},
                        {lw.ffn_up, &out->up},
                        {lw.ffn_down, &out->down},
                        {lw.ffn_router, &out->router},
                        {lw.ffn_exp_probs_b, &out->exp_probs_b},
                        {lw.ffn_gate_shexp, &out->gate_shexp},
                        {lw.ffn_up_shexp, &out->up_shexp},
                        {lw.ffn_down_shexp, &out->down_shexp},
                        {lw.ffn_router_b, &out->router_b},
                        {lw.ffn_gate_exps_b, &out->gate_exps_b},
                        {lw.ffn_up_exps_b, &out->up_exps_b},
                        {lw.ffn_down_exps_b, &out->down_exps_b}});
}

}  // namespace hypura::model
