// CpuBlocks: the Blocks of blocks.h on the CPU, in host memory, through compute::Context
// (its matmuls and its flash-style attention over the host KV cache) and the F32 helpers.
// Results are batch-invariant (model.h): a prompt split into any batches gives
// bit-identical rows.
//
// Thread-safety: one forward pass at a time; row-wise work and attention run on the
// context's pool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "compute/op_profile.h"
#include "model/blocks.h"
#include "model/host_experts.h"

namespace hypura::model {

class CpuBlocks final : public Blocks {
 public:
  CpuBlocks(const HParams& hp, const WeightMap& weights, compute::Context& ctx,
            WeightProvider& provider, int64_t max_batch, int64_t n_ctx);

  bool on_device() const override { return false; }
  compute::OpProfile* op_profile() const override { return ctx_.op_profile(); }
  void embed(const WeightView& table, const int32_t* tokens) override;
  void continue_from(const float* host_x) override;
  void norm(const float* in, const WeightView& w, float* out) override;
  void linear(const WeightView& w, const float* in, float* out) override;
  void project_qkv(const AttnViews& a, const float* in) override;
  void linear_shared(const WeightView* const* w, float* const* out, int n,
                     const float* in) override;
  void add_bias(float* rows, const WeightView& b) override;
  void head_norm(float* rows, int64_t n_heads, const WeightView& w) override;
  void rope(float* rows, int64_t n_heads, float freq_base, float freq_scale) override;
  void rope_qk(float freq_base, float freq_scale) override;
  void mla_kv(const WeightView& kv_norm) override;
  void mla_absorb_q(const float* q_heads, const WeightView& wk_b) override;
  void mla_query_key(const AttnViews& a) override;
  void mla_values(const WeightView& wv_b, float* out) override;
  void scale(float* rows, int64_t width, float s) override;
  void residual(float* x, const float* y) override;
  using Blocks::attention;
  void attention(int64_t il, bool swa, float kq_scale, const WeightView& sinks) override;
  void dense_ffn(const FfnViews& w, FfnAct act, const float* in, float* out) override;
  Status moe_ffn(int64_t il, const FfnViews& w, const float* in, float* out) override;
  Status finish(const WeightView& output, float* logits, float* hidden) override;

 private:
  // Attention (cpu_blocks.cc): a softmax partial over some keys of query rows: running max
  // m, running sum l of exp(score - m), acc = sum of exp(score - m) * value (rows, head_dim_v).
  struct Partial {
    float* m;
    double* l;
    float* acc;
  };
  struct AttnScratch;
  // One sequence's rows (t: the sequence's own token index, 0..seq.n_tokens).
  // branch: a draft tree's row (t1 = t0 + 1) reads position seq.tree_base + i from slot
  // seq.tree_base + branch[i] (its ancestors' nodes, then its own); empty otherwise.
  void attend_seq(int64_t il, const SeqRows& seq, bool swa, float kq_scale);
  void attend_tree(int64_t il, const SeqRows& seq, bool swa, float kq_scale);
  void attend_block(int64_t il, const SeqRows& seq, int64_t g, int64_t t0, int64_t t1, bool swa,
                    float kq_scale, int thread, std::span<const int32_t> branch = {});
  void segment_partial(int64_t il, const SeqRows& seq, int64_t g, int64_t t0, int64_t t1,
                       int64_t seg, bool swa, float kq_scale, AttnScratch& s, const Partial& out,
                       std::span<const int32_t> branch = {});
  // The rows of positions [first, first + n) of a branch's keys (values: !keys) in s's
  // gathered buffer, each from the slot the branch puts it in.
  compute::KvRows gather_branch(int64_t il, const SeqRows& seq, int64_t g, bool keys, int64_t first,
                                int64_t n, std::span<const int32_t> branch, AttnScratch& s) const;
  void clear_partial(const Partial& p, int64_t n_rows) const;
  void merge_partial(const Partial& total, const Partial& part, int64_t n_rows) const;
  void write_attention(const SeqRows& seq, int64_t g, int64_t t0, int64_t t1, const Partial& total);
  // Times the block's own work (the products it calls are timed apart) when profiling.
  compute::OpProfile::Scope timed(std::string_view op) const;
  const float* sinks_ = nullptr;  // the current attention()'s sink logits (n_head), or null
  // Runs fn(begin, end) over [0, n) split across the compute pool (inline when n < 2).
  // Elementwise and row-wise work only: results do not depend on the split.
  template <class Fn>
  void parallel_for(int64_t n, Fn&& fn);
  void gather_last_rows(const float* rows, float* out, bool logit_rows = false) const;
  // Row t's rotation angles (rope_cs_'s row t, valid until the next call for that row).
  const float* rope_angles(int64_t t, float freq_base, float freq_scale);
  // The rotation by angles cs of n_heads vectors of n_rot values, head_stride apart.
  void rotate_heads(float* row, int64_t n_heads, int64_t head_stride, const float* cs) const;
  // out[t, h] = w[h] . in[t, h] for every head h: a per-head product of a stacked
  // (n_cols, n_out, n_head) tensor, in/out (n_tokens, n_head, stride) at column offsets.
  void head_products(const WeightView& w, const float* in, int64_t in_stride, float* out,
                     int64_t out_stride);
  // q() heads' [.., q_pe] = q_pe of q_heads rotated by mla_kv()'s angles.
  void rope_q_pe(const float* q_heads);
  void observe_last_rows(int64_t il, const float* in);
  void route(const WeightView& bias);

  compute::Context& ctx_;
  std::vector<float> x_buf_, cur_buf_, tmp_buf_, k_buf_, v_buf_, attn_buf_;
  std::vector<float> rope_cs_;  // (max_batch, n_rot) each row's rotation angles (rope_angles)
  compute::AlignedVector<float> q_buf_;              // the attention kernels load query rows whole
  std::vector<float> mla_lora_buf_, mla_heads_buf_;  // MLA rows (blocks.h)
  std::vector<float> ff_gate_;                       // (max_batch, max(n_ff, n_ff_expert))
  std::vector<float> ff_up_;                         // (max_batch, max(n_ff, n_ff_expert))
  // Attention tiles (cpu_blocks.cc): query tokens per block, keys per aligned block, keys
  // per aligned segment, and the most tokens a step may have to split its segments over the pool.
  static constexpr int64_t kQueryBlock = 32;
  static constexpr int64_t kKeyBlock = compute::kAttnMaxKeys;
  static constexpr int64_t kKeySegment = 512;
  static constexpr int64_t kSplitMaxTokens = 4;
  // Above this many query rows a step widens its value block once (compute::kAttnTileRows
  // rows share each value load; more rows would convert every value again per tile).
  static constexpr int64_t kWidenValuesRows = compute::kAttnTileRows;
  // Attention scratch per pool thread; rows = kQueryBlock * (n_head / n_head_kv).
  struct AttnScratch {
    compute::AlignedVector<float> keys;  // (head_dim, kKeyBlock) one widened key block, transposed
    compute::AlignedVector<float> values;   // (kKeyBlock, head_dim_v)
    std::vector<const float*> q_rows;       // (rows) each row's query vector
    std::vector<int32_t> lo, hi;            // (rows) visible keys of the current key block
    std::vector<float> m;                   // (rows) the merged partial of a query block
    std::vector<double> l;                  // (rows)
    compute::AlignedVector<float> acc;      // (rows, head_dim_v)
    std::vector<float> seg_m;               // (rows) the partial of the segment being computed
    std::vector<double> seg_l;              // (rows)
    compute::AlignedVector<float> seg_acc;  // (rows, head_dim_v)
    std::vector<uint8_t> gathered_k, gathered_v;  // (kKeyBlock, head_dim[_v]) a branch's rows
  };
  std::vector<std::vector<int32_t>> branches_;  // a draft tree's rows' branches (attend_tree)
  std::vector<AttnScratch> attn_scratch_;
  // Partials of a split step: (kv head, segment, row) for up to kSplitMaxTokens tokens.
  std::vector<float> split_m_;               // (rows)
  std::vector<double> split_l_;              // (rows)
  compute::AlignedVector<float> split_acc_;  // (rows, head_dim_v)
  // MoE routing state.
  std::vector<float> router_probs_;       // (max_batch, n_expert)
  std::vector<float> route_scratch_;      // (n_expert) route_row's
  std::vector<float> shared_out_;         // (max_batch, n_embd) the shared expert's output
  std::vector<int32_t> selected_;         // (max_batch, n_expert_used) expert ids by slot
  std::vector<float> selected_w_;         // (max_batch, n_expert_used) renormalised weights
  std::vector<float> slot_out_;           // (max_batch, n_expert_used, n_embd)
  std::vector<float> last_rows_;          // (max_batch, n_embd) each sequence's last row
  std::unique_ptr<HostExperts> experts_;  // the routed experts (MoE models)
};

}  // namespace hypura::model
