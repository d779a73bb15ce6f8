// The shared building blocks of a transformer layer, on a batch of n_tokens rows.
//
// Architecture files (llama.cc, qwen2.cc, ...) compose these into a layer that reads like
// the math; everything here is written once: RMS norms, linear projections, per-head
// norms, RoPE (normal and NeoX), attention with GQA over the KV cache (causal, optionally
// sliding-window), gated FFNs (SwiGLU, GeGLU) and MoE routing.
//
// Buffers are owned here, sized once for max_batch rows (no allocation per token). Every
// row-wise operation treats rows independently, and attention computes each (query,
// head) pair with the same reduction order whatever the batch, so results are
// batch-invariant (see model.h).
//
// Thread-safety: one forward pass at a time; attention runs on the compute pool.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "compute/compute.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/weights.h"

#include "runtime/weight_provider.h"

namespace hypura::model {

using compute::WeightView;
using runtime::ExpertRequest;

// Views of one layer's attention weights; absent tensors have data == nullptr.
struct AttnViews {
  WeightView norm, wq, wk, wv, wo;
  WeightView bq, bk, bv;      // qwen2
  WeightView q_norm, k_norm;  // qwen3, gemma3
  WeightView post_norm;       // gemma3
};

// Views of one layer's FFN weights. MoE experts are acquired per token batch inside
// moe_ffn(), after routing, so a streaming provider reads only the selected ones.
struct FfnViews {
  WeightView norm, post_norm;
  WeightView gate, up, down;  // dense
  WeightView router;          // MoE ffn_gate_inp
  TensorId gate_exps = kNone, up_exps = kNone, down_exps = kNone;
};

enum class FfnAct { kSilu, kGeluTanh };

class Blocks {
 public:
  Blocks(const HParams& hp, const WeightMap& weights, compute::Context& ctx,
         runtime::WeightProvider& provider, int64_t max_batch, int64_t n_ctx);

  const HParams& hp() const { return hp_; }
  runtime::WeightProvider& provider() { return provider_; }
  compute::Context& ctx() { return ctx_; }

  // Starts a batch: tokens at positions pos..pos+n_tokens-1, caching into kv.
  void begin(int64_t pos, int64_t n_tokens, KvCache* kv);
  // llama3 RoPE frequency factors (n_rot / 2), or null; valid for the current batch.
  void set_rope_factors(const float* factors) { rope_factors_ = factors; }
  int64_t n_tokens() const { return n_tokens_; }

  // Batch buffers, row-major with n_tokens rows.
  float* x() { return x_.data(); }        // (n_tokens, n_embd) the residual stream
  float* cur() { return cur_.data(); }    // (n_tokens, n_embd) block input/output
  float* tmp() { return tmp_.data(); }    // (n_tokens, n_embd) second scratch
  float* q() { return q_.data(); }        // (n_tokens, n_head * head_dim)
  float* k() { return k_.data(); }        // (n_tokens, n_head_kv * head_dim)
  float* v() { return v_.data(); }        // (n_tokens, n_head_kv * head_dim_v)
  float* attn() { return attn_.data(); }  // (n_tokens, n_head * head_dim_v)

  Status acquire_attention(int64_t il, AttnViews* out);
  Status acquire_ffn(int64_t il, FfnViews* out);

  // out = in / rms(in) * w over rows of w's length. out may alias in.
  void norm(const float* in, const WeightView& w, float* out);
  // out (n_tokens, w.n_rows) = in (n_tokens, w.n_cols) . W^T
  void linear(const WeightView& w, const float* in, float* out);
  // rows (n_tokens, b.n_cols) += b
  void add_bias(float* rows, const WeightView& b);
  // Per-head RMS norm: rows (n_tokens, n_heads * w.n_cols), each head normed by w.
  void head_norm(float* rows, int64_t n_heads, const WeightView& w);
  // RoPE on rows (n_tokens, n_heads * head_dim) at the batch's positions.
  void rope(float* rows, int64_t n_heads, float freq_base, float freq_scale);
  // rows (n_tokens, width) *= s
  void scale(float* rows, int64_t width, float s);
  // x (n_tokens, n_embd) += y
  void residual(float* x, const float* y);

  // Stores k()/v() in the cache, then attn() = softmax(q k^T * kq_scale + mask) v for every
  // query row and head; swa restricts each query to the last n_swa positions.
  void attention(int64_t il, bool swa, float kq_scale);

  // out = down(act(gate(in)) * up(in)). in, out: (n_tokens, n_embd); may alias.
  void dense_ffn(const FfnViews& w, FfnAct act, const float* in, float* out);
  // Mixture of experts: softmax router, top n_expert_used, weights renormalised to sum 1,
  // SwiGLU experts, weighted sum in slot order. in, out: (n_tokens, n_embd); may alias.
  Status moe_ffn(int64_t il, const FfnViews& w, const float* in, float* out);

 private:
  // Attention (blocks.cc): a softmax partial over some keys of query rows: running max m,
  // running sum l of exp(score - m), acc = sum of exp(score - m) * value (rows, head_dim_v).
  struct Partial {
    float* m;
    double* l;
    float* acc;
  };
  struct AttnScratch;
  void attend_block(int64_t il, int64_t g, int64_t t0, int64_t t1, bool swa, float kq_scale,
                    int thread);
  void segment_partial(int64_t il, int64_t g, int64_t t0, int64_t t1, int64_t seg, bool swa,
                       float kq_scale, AttnScratch& s, const Partial& out);
  void clear_partial(const Partial& p, int64_t n_rows) const;
  void merge_partial(const Partial& total, const Partial& part, int64_t n_rows) const;
  void write_attention(int64_t g, int64_t t0, int64_t t1, const Partial& total);
  // Runs fn(begin, end) over [0, n) split across the compute pool (inline when n < 2).
  // Elementwise and row-wise work only: results do not depend on the split.
  template <class Fn>
  void parallel_for(int64_t n, Fn&& fn);
  void route(const float* in);
  void gated_activation(FfnAct act, int64_t n);
  Status run_experts(int64_t il, const FfnViews& w, const float* in);
  void run_expert(int32_t id, const float* in);

  const HParams& hp_;
  const WeightMap& weights_;
  compute::Context& ctx_;
  runtime::WeightProvider& provider_;
  int64_t max_batch_;
  int64_t n_ctx_;

  int64_t pos_ = 0;
  int64_t n_tokens_ = 0;
  KvCache* kv_ = nullptr;
  const float* rope_factors_ = nullptr;

  std::vector<float> x_, cur_, tmp_, q_, k_, v_, attn_;
  std::vector<float> ff_gate_;  // (max_batch, max(n_ff, n_ff_expert))
  std::vector<float> ff_up_;    // (max_batch, max(n_ff, n_ff_expert))
  // Attention tiles (blocks.cc): query tokens per block, keys per aligned block, keys per
  // aligned segment, and the most tokens a step may have to split its segments over the pool.
  static constexpr int64_t kQueryBlock = 32;
  static constexpr int64_t kKeyBlock = compute::kAttnMaxKeys;
  static constexpr int64_t kKeySegment = 512;
  static constexpr int64_t kSplitMaxTokens = 4;
  // Attention scratch per pool thread; rows = kQueryBlock * (n_head / n_head_kv).
  struct AttnScratch {
    std::vector<float> keys;    // (kKeyBlock, head_dim) one widened key block
    std::vector<float> values;  // (kKeyBlock, head_dim_v)
    std::vector<const float*> q_rows;  // (rows) each row's query vector
    std::vector<int32_t> lo, hi;       // (rows) visible keys of the current key block
    std::vector<float> m;       // (rows) the merged partial of a query block
    std::vector<double> l;      // (rows)
    std::vector<float> acc;     // (rows, head_dim_v)
    std::vector<float> seg_m;   // (rows) the partial of the segment being computed
    std::vector<double> seg_l;  // (rows)
    std::vector<float> seg_acc; // (rows, head_dim_v)
  };
  std::vector<AttnScratch> attn_scratch_;
  // Partials of a split step: (kv head, segment, row) for up to kSplitMaxTokens tokens.
  std::vector<float> split_m_;      // (rows)
  std::vector<double> split_l_;     // (rows)
  std::vector<float> split_acc_;    // (rows, head_dim_v)
  // MoE routing state.
  std::vector<float> router_probs_;     // (max_batch, n_expert)
  std::vector<int32_t> selected_;       // (max_batch, n_expert_used) expert ids by slot
  std::vector<float> selected_w_;       // (max_batch, n_expert_used) renormalised weights
  std::vector<float> slot_out_;         // (max_batch, n_expert_used, n_embd)
  std::vector<float> expert_in_;        // (max_batch, n_embd) gathered rows of one expert
  std::vector<float> expert_out_;       // (max_batch, n_embd)
  std::vector<int32_t> expert_rows_;    // (max_batch * n_expert_used) token*K+slot per expert
  std::vector<int32_t> used_experts_;   // distinct experts of the batch (capacity n_expert)
};

}  // namespace hypura::model
