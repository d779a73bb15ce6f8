// The shared building blocks of a transformer layer, on a batch of n_tokens rows, and the
// interface that lets the same architecture code run on the CPU or on a GPU.
//
// Architecture files (llama.cc, qwen2.cc, ...) compose these into a layer that reads like
// the math; every op is written once per device: RMS norms, linear projections, per-head
// norms, RoPE (normal and NeoX), attention with GQA over the KV cache (causal, optionally
// sliding-window), gated FFNs (SwiGLU, GeGLU) and MoE routing.
//
// Blocks is abstract. CpuBlocks (cpu_blocks.h) computes in host memory through
// compute::Context; CudaBlocks (cuda_blocks.h) in device memory through compute/cuda. The
// row buffers (x(), cur(), q(), ...) are the implementation's memory: host or device
// pointers that model code passes from op to op and never dereferences. Weight views come
// from the provider, which for a device implementation hands out device views.
//
// Buffers are owned by the implementation, sized once for max_batch rows (no allocation
// per token). Every row-wise operation treats rows independently, and the CPU's attention
// computes each (query, head) pair with the same reduction order whatever the batch, so
// its results are batch-invariant (see model.h); the GPU's differ across batch shapes by
// float rounding (docs/GPU.md).
//
// A batch may hold several sequences (continuous batching, runtime/step_batcher.h): each
// is a run of consecutive rows with its own KV cache and positions (SeqRows). Row-wise ops
// and products see one (n_tokens, width) matrix whatever the sequences; RoPE reads each
// row's position and attention attends each sequence's rows over its own cache, so one
// pass reads the weights once for every sequence.
//
// Thread-safety: one forward pass at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "compute/compute.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/seq_rows.h"
#include "model/weight_provider.h"
#include "model/weights.h"

namespace hypura::model {

using compute::WeightView;

// Views of one layer's attention weights; absent tensors have data == nullptr.
struct AttnViews {
  WeightView norm, wq, wk, wv, wo;
  WeightView bq, bk, bv;      // qwen2
  WeightView q_norm, k_norm;  // qwen3, gemma3
  WeightView post_norm;       // gemma3
  // deepseek2's multi-head latent attention (wq is attn_q when q_lora_rank is 0).
  WeightView wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm, wk_b, wv_b;
  WeightView bo;     // attn_output bias (gpt-oss)
  WeightView sinks;  // (n_head) attention sink logits (gpt-oss)
};

// Views of one layer's FFN weights. MoE experts are acquired per token batch inside
// moe_ffn(), after routing, so a streaming provider reads only the selected ones.
struct FfnViews {
  WeightView norm, post_norm;
  WeightView gate, up, down;                    // dense
  WeightView router;                            // MoE ffn_gate_inp
  WeightView exp_probs_b;                       // MoE selection bias (routing.h), optional
  WeightView gate_shexp, up_shexp, down_shexp;  // MoE shared expert, optional
  TensorId gate_exps = kNone, up_exps = kNone, down_exps = kNone;
  WeightView router_b;                             // router logit bias (gpt-oss)
  WeightView gate_exps_b, up_exps_b, down_exps_b;  // every expert's bias rows (gpt-oss)
};

class Blocks {
 public:
  virtual ~Blocks() = default;

  const HParams& hp() const { return hp_; }
  WeightProvider& provider() { return provider_; }
  int64_t n_ctx() const { return n_ctx_; }  // the longest sequence the scratch is sized for
  // Whether the row buffers and the KV cache this implementation reads are device memory.
  virtual bool on_device() const = 0;
  // Where this implementation times its work (`bench --profile-ops`); null: not timed.
  virtual compute::OpProfile* op_profile() const { return nullptr; }

  // Starts a batch of the sequences' rows, in order (row0 is filled in), each caching
  // into its own kv. logits_only: the outputs are the logits of each sequence's last
  // n_logits rows (finish() gets no hidden states). REQUIRES: 1..max_batch rows in all, distinct
  // caches.
  void begin(std::span<const SeqRows> seqs, bool logits_only = false);
  // llama3 RoPE frequency factors (n_rot / 2), or null; valid for the current batch.
  void set_rope_factors(const float* factors) { rope_factors_ = factors; }
  int64_t n_tokens() const { return n_tokens_; }
  int64_t logit_rows() const { return logit_rows_; }  // the batch's n_logits, summed
  std::span<const SeqRows> seqs() const { return seqs_; }
  // Every row's position, host memory (n_tokens).
  const int32_t* row_positions() const { return row_pos_.data(); }

  // Batch buffers, row-major with n_tokens rows.
  float* x() { return x_; }        // (n_tokens, n_embd) the residual stream
  float* cur() { return cur_; }    // (n_tokens, n_embd) block input/output
  float* tmp() { return tmp_; }    // (n_tokens, n_embd) second scratch
  float* q() { return q_; }        // (n_tokens, n_head * head_dim)
  float* k() { return k_; }        // (n_tokens, n_head_kv * head_dim)
  float* v() { return v_; }        // (n_tokens, n_head_kv * head_dim_v)
  float* attn() { return attn_; }  // (n_tokens, n_head * head_dim_v)
  // MLA only: (n_tokens, q_lora_rank) and (n_tokens, n_head * max(head_dim_mla, head_dim_v_mla)).
  float* mla_lora() { return mla_lora_; }
  float* mla_heads() { return mla_heads_; }

  Status acquire_attention(int64_t il, AttnViews* out);
  Status acquire_ffn(int64_t il, FfnViews* out);

  // x() = rows tokens[0..n_tokens) (host ids, checked by the caller) of the embedding table.
  virtual void embed(const WeightView& table, const int32_t* tokens) = 0;
  // Instead of embed(), for blocks that continue a pass another Blocks began (a model split
  // between the CPU and a GPU, model.h): x() = host_x, (n_tokens, n_embd) host memory.
  virtual void continue_from(const float* host_x) = 0;
  // out = in / rms(in) * w over rows of w's length. out may alias in.
  virtual void norm(const float* in, const WeightView& w, float* out) = 0;
  // out (n_tokens, w.n_rows) = in (n_tokens, w.n_cols) . W^T
  virtual void linear(const WeightView& w, const float* in, float* out) = 0;
  // q(), k(), v() = linear(wq / wk / wv, in): one input for three products (the GPU rounds
  // it to 8 bits once).
  virtual void project_qkv(const AttnViews& a, const float* in) = 0;
  // out[i] = linear(*w[i], in) for i < n (at most 4): products of one input, which an
  // implementation may run together (the CPU: one pool job, as project_qkv's).
  virtual void linear_shared(const WeightView* const* w, float* const* out, int n,
                             const float* in) {
    for (int i = 0; i < n; ++i) linear(*w[i], in, out[i]);
  }
  // rows (n_tokens, b.n_cols) += b
  virtual void add_bias(float* rows, const WeightView& b) = 0;
  // q(), k(), v() += the layer's q/k/v biases, those the file has.
  void add_qkv_biases(const AttnViews& a) {
    if (a.bq.data != nullptr) add_bias(q(), a.bq);
    if (a.bk.data != nullptr) add_bias(k(), a.bk);
    if (a.bv.data != nullptr) add_bias(v(), a.bv);
  }
  // Per-head RMS norm: rows (n_tokens, n_heads * w.n_cols), each head normed by w.
  virtual void head_norm(float* rows, int64_t n_heads, const WeightView& w) = 0;
  // RoPE on rows (n_tokens, n_heads * head_dim) at the batch's positions.
  virtual void rope(float* rows, int64_t n_heads, float freq_base, float freq_scale) = 0;
  // rope() of q() (n_head heads) and of k() (n_head_kv heads) with the same frequencies.
  virtual void rope_qk(float freq_base, float freq_scale) = 0;
  // Multi-head latent attention (deepseek2), in the absorbed form: attention runs as MQA
  // over the cached latent, so the cache holds kv_lora_rank + n_rot values per position.
  // k() rows hold attn_kv_a_mqa's output [latent, k_pe]: each latent is RMS-normed by
  // kv_norm and each k_pe rotated at its row's position (YaRN), giving the key to cache.
  virtual void mla_kv(const WeightView& kv_norm) = 0;
  // q() = per head [wk_b[h] . q_nope, RoPE(q_pe)] from q_heads (n_tokens, n_head *
  // head_dim_mla) laid out [q_nope, q_pe] per head: q_nope absorbed into the latent space.
  // Called after the layer's mla_kv(), whose rotation it shares.
  virtual void mla_absorb_q(const float* q_heads, const WeightView& wk_b) = 0;
  // MLA's query and key from the normed rows in cur(): q_heads (mla_heads()) = Wq_b
  // RMSNorm(Wq_a cur) (or Wq cur), k() = Wkv_a cur, then mla_kv() and mla_absorb_q(). An
  // implementation may fuse the products (the CPU's decode step: the per-head ones in one job).
  virtual void mla_query_key(const AttnViews& a);
  // out (n_tokens, n_head * head_dim_v_mla) = per head wv_b[h] . attn()[t, h]: each head's
  // attention over latents decompressed into its values.
  virtual void mla_values(const WeightView& wv_b, float* out) = 0;
  // rows (n_tokens, width) *= s
  virtual void scale(float* rows, int64_t width, float s) = 0;
  // x (n_tokens, n_embd) += y
  virtual void residual(float* x, const float* y) = 0;

  // Stores k()/v() in the cache, then attn() = softmax(q k^T * kq_scale + mask) v for every
  // query row and head; swa restricts each query to the last n_swa positions. sinks (n_head
  // F32, or absent): head h's softmax denominator also sums exp(sinks[h]), a logit with no
  // value vector, so a head may attend to nothing.
  virtual void attention(int64_t il, bool swa, float kq_scale, const WeightView& sinks) = 0;
  void attention(int64_t il, bool swa, float kq_scale) {
    attention(il, swa, kq_scale, WeightView{});
  }

  // out = down(act(gate(in)) * up(in)). in, out: (n_tokens, n_embd); may alias.
  virtual void dense_ffn(const FfnViews& w, FfnAct act, const float* in, float* out) = 0;
  // Mixture of experts: the router (plus its bias, if any) and route_row() (routing.h:
  // gating, selection bias, groups, weight norm and scale), the experts (hp().expert_act,
  // plus their biases when present), weighted sum in slot order, plus the shared expert's
  // output when the layer has one. in, out: (n_tokens, n_embd); may alias.
  virtual Status moe_ffn(int64_t il, const FfnViews& w, const float* in, float* out) = 0;

  // Ends the batch: hidden (when not null, host) = cur() (n_tokens, n_embd), the final-
  // norm states; logits (host, when not null) = output . cur() for the last n_logits rows
  // of each sequence, in order ((logit_rows(), n_vocab)). Returns the first error of the
  // batch's device work, if any.
  virtual Status finish(const WeightView& output, float* logits, float* hidden) = 0;

 protected:
  Blocks(const HParams& hp, const WeightMap& weights, WeightProvider& provider, int64_t max_batch,
         int64_t n_ctx)
      : hp_(hp), weights_(weights), provider_(provider), max_batch_(max_batch), n_ctx_(n_ctx) {
    seqs_.reserve(static_cast<size_t>(max_batch));
    row_pos_.resize(static_cast<size_t>(max_batch));
  }

  const HParams& hp_;
  const WeightMap& weights_;
  WeightProvider& provider_;
  int64_t max_batch_;
  int64_t n_ctx_;

  int64_t n_tokens_ = 0;
  std::vector<SeqRows> seqs_;     // the batch's sequences (capacity max_batch)
  std::vector<int32_t> row_pos_;  // (max_batch) each row's position
  bool logits_only_ = false;
  int64_t logit_rows_ = 0;
  const float* rope_factors_ = nullptr;

  // The row buffers, set by the implementation (its memory).
  float *x_ = nullptr, *cur_ = nullptr, *tmp_ = nullptr, *q_ = nullptr, *k_ = nullptr,
        *v_ = nullptr, *attn_ = nullptr, *mla_lora_ = nullptr, *mla_heads_ = nullptr;
};

}  // namespace hypura::model
