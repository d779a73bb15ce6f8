#include "model/cpu_blocks.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstring>

#include "compute/cpu/thread_pool.h"
#include "model/routing.h"
#include "model/weight_provider.h"

namespace hypura::model {
namespace {

const float* as_floats(const WeightView& w) {
  return static_cast<const float*>(w.data);
}

}  // namespace

CpuBlocks::CpuBlocks(const HParams& hp, const WeightMap& weights, compute::Context& ctx,
                     WeightProvider& provider, int64_t max_batch, int64_t n_ctx)
    : Blocks(hp, weights, provider, max_batch, n_ctx), ctx_(ctx) {
  const auto rows = [&](int64_t width) { return static_cast<size_t>(max_batch * width); };
  x_buf_.resize(rows(hp.n_embd));
  cur_buf_.resize(rows(hp.n_embd));
  tmp_buf_.resize(rows(hp.n_embd));
  q_buf_.resize(rows(hp.q_width()));
  k_buf_.resize(rows(hp.k_width()));
  v_buf_.resize(rows(hp.v_width()));
  attn_buf_.resize(rows(hp.n_head * hp.head_dim_v));
  rope_cs_.resize(rows(hp.n_rot));
  x_ = x_buf_.data();
  cur_ = cur_buf_.data();
  tmp_ = tmp_buf_.data();
  q_ = q_buf_.data();
  k_ = k_buf_.data();
  v_ = v_buf_.data();
  attn_ = attn_buf_.data();
  if (hp.is_mla()) {
    const int64_t heads = hp.n_head * std::max(hp.head_dim_mla, hp.head_dim_v_mla);
    mla_lora_buf_.resize(rows(hp.q_lora_rank));
    mla_heads_buf_.resize(rows(heads));
    mla_lora_ = mla_lora_buf_.data();
    mla_heads_ = mla_heads_buf_.data();
  }
  const int64_t ff = std::max({hp.n_ff, hp.n_ff_expert, hp.n_ff_shexp()});
  ff_gate_.resize(rows(ff));
  ff_up_.resize(rows(ff));
  attn_scratch_.resize(static_cast<size_t>(ctx.n_threads()));
  const auto block_rows = static_cast<size_t>(kQueryBlock * (hp.n_head / hp.n_head_kv));
  for (auto& s : attn_scratch_) {
    s.keys.resize(static_cast<size_t>(kKeyBlock * hp.head_dim));
    s.values.resize(static_cast<size_t>(kKeyBlock * hp.head_dim_v));
    s.q_rows.resize(block_rows);
    s.lo.resize(block_rows);
    s.hi.resize(block_rows);
    s.m.resize(block_rows);
    s.l.resize(block_rows);
    s.acc.resize(block_rows * static_cast<size_t>(hp.head_dim_v));
    s.seg_m.resize(block_rows);
    s.seg_l.resize(block_rows);
    s.seg_acc.resize(block_rows * static_cast<size_t>(hp.head_dim_v));
    s.gathered_k.resize(static_cast<size_t>(kKeyBlock * hp.head_dim) * sizeof(float));
    s.gathered_v.resize(static_cast<size_t>(kKeyBlock * hp.head_dim_v) * sizeof(float));
  }
  // Partials of a split step: (kv head, segment, rows of up to kSplitMaxTokens tokens).
  const auto split_rows =
      static_cast<size_t>(hp.n_head_kv * ((n_ctx + kKeySegment - 1) / kKeySegment) *
                          kSplitMaxTokens * (hp.n_head / hp.n_head_kv));
  split_m_.resize(split_rows);
  split_l_.resize(split_rows);
  split_acc_.resize(split_rows * static_cast<size_t>(hp.head_dim_v));
  if (hp.n_expert > 0) {
    router_probs_.resize(rows(hp.n_expert));
    route_scratch_.resize(static_cast<size_t>(hp.n_expert));
    if (hp.n_expert_shared > 0) shared_out_.resize(rows(hp.n_embd));
    selected_.resize(rows(hp.n_expert_used));
    selected_w_.resize(rows(hp.n_expert_used));
    slot_out_.resize(rows(hp.n_expert_used * hp.n_embd));
    last_rows_.resize(rows(hp.n_embd));
    experts_ = std::make_unique<HostExperts>(hp, ctx, provider, max_batch);
  }
  ctx.reserve(max_batch,
              std::max({hp.n_embd, ff, hp.n_head * hp.head_dim_v, hp.q_lora_rank,
                        hp.n_head * hp.head_dim_v_mla, hp.n_ff_expert * hp.n_expert_shared}));
}

compute::OpProfile::Scope CpuBlocks::timed(std::string_view op) const {
  return {op_profile(), {op}};
}

template <class Fn>
void CpuBlocks::parallel_for(int64_t n, Fn&& fn) {
  if (n < 2 || ctx_.n_threads() == 1) {
    fn(int64_t{0}, n);
    return;
  }
  ctx_.pool().run([&](int ith, int nth) {
    int64_t begin, end;
    compute::split_range(n, ith, nth, 1, &begin, &end);
    if (begin < end) fn(begin, end);
  });
}

void CpuBlocks::embed(const WeightView& table, const int32_t* tokens) {
  const auto scope = timed("embed");
  ctx_.get_rows(table, tokens, n_tokens_, x());
}

void CpuBlocks::continue_from(const float* host_x) {
  std::copy_n(host_x, n_tokens_ * hp_.n_embd, x());
}

Status CpuBlocks::finish(const WeightView& output, float* logits, float* hidden) {
  const auto scope = timed("output head");
  const int64_t e = hp_.n_embd;
  if (hidden != nullptr) std::copy_n(cur(), n_tokens_ * e, hidden);
  if (logits == nullptr) return Status::ok();  // embeddings only: no output layer
  if (logit_rows_ == n_tokens_) {
    ctx_.matmul(output, cur(), n_tokens_, logits);
    return Status::ok();
  }
  if (seqs_.size() == 1) {
    ctx_.matmul(output, cur() + (n_tokens_ - logit_rows_) * e, logit_rows_, logits);
    return Status::ok();
  }
  // Each sequence's output rows, gathered: one product for all (rows are independent).
  gather_last_rows(cur(), tmp(), /*logit_rows=*/true);
  ctx_.matmul(output, tmp(), logit_rows_, logits);
  return Status::ok();
}

void CpuBlocks::norm(const float* in, const WeightView& w, float* out) {
  const auto scope = timed("norm");
  const int64_t width = w.n_cols;
  parallel_for(n_tokens_, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      compute::rms_norm(in + t * width, as_floats(w), width, hp_.rms_eps, out + t * width);
    }
  });
}

void CpuBlocks::linear(const WeightView& w, const float* in, float* out) {
  ctx_.matmul(w, in, n_tokens_, out);
}

void CpuBlocks::project_qkv(const AttnViews& a, const float* in) {
  const WeightView* w[] = {&a.wq, &a.wk, &a.wv};
  float* y[] = {q(), k(), v()};
  linear_shared(w, y, 3, in);
}

void CpuBlocks::linear_shared(const WeightView* const* w, float* const* out, int n,
                              const float* in) {
  ctx_.matmul_shared(w, out, n, in, n_tokens_);
}

void CpuBlocks::add_bias(float* rows, const WeightView& b) {
  const auto scope = timed("bias");
  for (int64_t t = 0; t < n_tokens_; ++t) compute::add(rows + t * b.n_cols, as_floats(b), b.n_cols);
}

void CpuBlocks::head_norm(float* rows, int64_t n_heads, const WeightView& w) {
  const auto scope = timed("head norm");
  const int64_t d = w.n_cols;
  parallel_for(n_tokens_, [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0 * n_heads; i < t1 * n_heads; ++i) {
      compute::rms_norm(rows + i * d, as_floats(w), d, hp_.rms_eps, rows + i * d);
    }
  });
}

const float* CpuBlocks::rope_angles(int64_t t, float freq_base, float freq_scale) {
  const compute::Yarn y =
      compute::yarn(hp_.n_rot, hp_.n_ctx_orig_yarn, freq_base, hp_.yarn_beta_fast,
                    hp_.yarn_beta_slow, hp_.yarn_ext_factor, hp_.yarn_attn_factor);
  float* cs = rope_cs_.data() + t * hp_.n_rot;  // row t's own slice: rows run on any thread
  compute::rope_yarn_angles(hp_.n_rot, row_pos_[static_cast<size_t>(t)], freq_base, freq_scale,
                            rope_factors_, y, cs);
  return cs;
}

void CpuBlocks::rotate_heads(float* row, int64_t n_heads, int64_t head_stride,
                             const float* cs) const {
  for (int64_t h = 0; h < n_heads; ++h)
    compute::rope_rotate(row + h * head_stride, hp_.n_rot, cs, hp_.rope_neox);
}

void CpuBlocks::rope(float* rows, int64_t n_heads, float freq_base, float freq_scale) {
  const auto scope = timed("rope");
  const int64_t d = hp_.head_dim;
  parallel_for(n_tokens_, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      rotate_heads(rows + t * n_heads * d, n_heads, d, rope_angles(t, freq_base, freq_scale));
  });
}

void CpuBlocks::rope_qk(float freq_base, float freq_scale) {
  const auto scope = timed("rope");
  const int64_t d = hp_.head_dim;
  parallel_for(n_tokens_, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = rope_angles(t, freq_base, freq_scale);  // one row's angles for q and k
      rotate_heads(q() + t * hp_.n_head * d, hp_.n_head, d, cs);
      rotate_heads(k() + t * hp_.n_head_kv * d, hp_.n_head_kv, d, cs);
    }
  });
}

void CpuBlocks::mla_kv(const WeightView& kv_norm) {
  const auto scope = timed("mla");
  const int64_t rank = hp_.kv_lora_rank, d = hp_.head_dim;
  parallel_for(n_tokens_, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = k() + t * d;
      compute::rms_norm(row, as_floats(kv_norm), rank, hp_.rms_eps, row);
      rotate_heads(row + rank, 1, d, rope_angles(t, hp_.rope_freq_base, hp_.rope_freq_scale));
    }
  });
}

void CpuBlocks::head_products(const WeightView& w, const float* in, int64_t in_stride, float* out,
                              int64_t out_stride) {
  const int64_t n_head = hp_.n_head;
  // Each head's rows read and written in place: head h of token t at (t * n_head + h) * stride.
  ctx_.matmul_grouped(w, n_head, in, n_tokens_, out,
                      compute::Context::GroupedLayout{in_stride, n_head * in_stride, out_stride,
                                                      n_head * out_stride});
}

void CpuBlocks::mla_absorb_q(const float* q_heads, const WeightView& wk_b) {
  const auto scope = timed("mla");
  head_products(wk_b, q_heads, hp_.head_dim_mla, q(), hp_.head_dim);
  rope_q_pe(q_heads);
}

// A decode step's q path in two pool jobs (one when there is no q compression): the heads'
// q rows and their absorption chained per head (Context::matmul_chained), Wkv_a beside
// them or beside Wq_a; each product as mla_absorb_q() and linear() compute it.
void CpuBlocks::mla_query_key(const AttnViews& a) {
  const auto scope = timed("mla");
  if (n_tokens_ != 1) {
    Blocks::mla_query_key(a);
    return;
  }
  const int64_t n_head = hp_.n_head, dq = hp_.head_dim_mla, d = hp_.head_dim;
  float* q_heads = mla_heads();
  if (hp_.q_lora_rank > 0) {
    const WeightView* w[] = {&a.wq_a, &a.wkv_a};
    float* out[] = {mla_lora(), k()};
    linear_shared(w, out, 2, cur());
    norm(mla_lora(), a.q_a_norm, mla_lora());
    ctx_.matmul_chained(a.wq_b, a.wk_b, n_head, mla_lora(), q_heads, dq, q(), d, nullptr, nullptr);
  } else {
    ctx_.matmul_chained(a.wq, a.wk_b, n_head, cur(), q_heads, dq, q(), d, &a.wkv_a, k());
  }
  mla_kv(a.kv_a_norm);
  rope_q_pe(q_heads);
}

void CpuBlocks::rope_q_pe(const float* q_heads) {
  const int64_t dq = hp_.head_dim_mla, d = hp_.head_dim, nope = hp_.qk_nope();
  parallel_for(n_tokens_, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t h = 0; h < hp_.n_head; ++h) {
        std::copy_n(q_heads + (t * hp_.n_head + h) * dq + nope, hp_.n_rot,
                    q() + (t * hp_.n_head + h) * d + hp_.kv_lora_rank);
      }
      // mla_kv's angles: the same rows at the same positions and frequencies.
      rotate_heads(q() + t * hp_.n_head * d + hp_.kv_lora_rank, hp_.n_head, d,
                   rope_cs_.data() + t * hp_.n_rot);
    }
  });
}

void CpuBlocks::mla_values(const WeightView& wv_b, float* out) {
  const auto scope = timed("mla");
  head_products(wv_b, attn(), hp_.head_dim_v, out, hp_.head_dim_v_mla);
}

void CpuBlocks::scale(float* rows, int64_t width, float s) {
  const auto scope = timed("scale");
  compute::scale(rows, s, n_tokens_ * width);
}

void CpuBlocks::residual(float* x, const float* y) {
  const auto scope = timed("residual");
  compute::add(x, y, n_tokens_ * hp_.n_embd);
}

// Attention, flash-attention style: query rows are taken in blocks of kQueryBlock tokens
// (times the q heads sharing a kv head), keys and values in blocks of kKeyBlock positions
// aligned to absolute positions. Each key block is widened from the cache once and used
// by every query row of the block, with an online softmax (running max m, running sum l,
// rescaled accumulator), so the cost per prompt token grows only with the attention
// arithmetic itself.
//
// Keys are grouped in segments of kKeySegment aligned positions: each segment's softmax
// partial (m, l, acc) is computed from a fresh state and the partials are merged in
// segment order. A prompt's work items are (query block, kv head) pairs, each walking its
// segments in turn; a step of one or a few tokens has too few such items for the pool, so
// its segments become items of their own, computed in parallel and merged afterwards.
//
// Batch invariance: a query row meets the same segments and key blocks in the same order,
// and every score, update and merge is computed by the same code whichever path, batch or
// block it is in, so a prompt split into any batches gives bit-identical rows.
void CpuBlocks::attention(int64_t il, bool swa, float kq_scale, const WeightView& sinks) {
  const auto scope = timed("attention");
  sinks_ = as_floats(sinks);
  for (const SeqRows& seq : seqs_) attend_seq(il, seq, swa, kq_scale);
}

void CpuBlocks::attend_seq(int64_t il, const SeqRows& seq, bool swa, float kq_scale) {
  const int64_t n = seq.n_tokens;
  seq.kv->store(il, seq.pos, n, k() + seq.row0 * hp_.k_width(), v() + seq.row0 * hp_.v_width());
  if (seq.tree_parent != nullptr) return attend_tree(il, seq, swa, kq_scale);
  const int64_t n_kv = hp_.n_head_kv;
  const int64_t n_qblocks = (n + kQueryBlock - 1) / kQueryBlock;
  const int64_t n_segments = (seq.pos + n - 1) / kKeySegment + 1;
  const bool split = n <= kSplitMaxTokens && n_segments > 1;
  if (!split) {
    // Items (query block, kv head) claimed one at a time, the last query blocks first: a
    // causal prompt's blocks see more keys the later they come, so equal counts of items
    // would leave one share with most of the work.
    const int64_t n_items = n_qblocks * n_kv;
    std::atomic<int64_t> next{0};
    const auto blocks = [&](int ith, int) {
      for (int64_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
        const int64_t i = n_items - 1 - k;
        const int64_t t0 = (i / n_kv) * kQueryBlock;
        attend_block(il, seq, i % n_kv, t0, std::min(n, t0 + kQueryBlock), swa, kq_scale, ith);
      }
    };
    // One item (a decode step of MLA's single kv head): the caller, without a pool job.
    if (n_items == 1) {
      blocks(0, 1);
    } else {
      ctx_.pool().run(blocks);
    }
    return;
  }
  // One query block (n <= kSplitMaxTokens): items are (kv head, segment).
  const int64_t n_rows = n * (hp_.n_head / n_kv), dv = hp_.head_dim_v;
  // Each item writes its own partial, so the result does not depend on the split.
  auto part = [&](int64_t g, int64_t seg) {
    const int64_t row0 = (g * n_segments + seg) * n_rows;
    return Partial{split_m_.data() + row0, split_l_.data() + row0, split_acc_.data() + row0 * dv};
  };
  ctx_.pool().run([&](int ith, int nth) {
    int64_t begin, end;
    compute::split_range(n_kv * n_segments, ith, nth, 1, &begin, &end);
    // Items in segment order, a segment's kv heads in turn: its cache rows (every head's
    // keys side by side) are fetched from memory whole once.
    for (int64_t i = begin; i < end; ++i) {
      const int64_t seg = i / n_kv, g = i % n_kv;
      segment_partial(il, seq, g, 0, n, seg, swa, kq_scale, attn_scratch_[ith], part(g, seg));
    }
  });
  for (int64_t g = 0; g < n_kv; ++g) {
    AttnScratch& s = attn_scratch_[0];
    const Partial total{s.m.data(), s.l.data(), s.acc.data()};
    clear_partial(total, n_rows);
    for (int64_t seg = 0; seg < n_segments; ++seg) merge_partial(total, part(g, seg), n_rows);
    write_attention(seq, g, 0, n, total);
  }
}

// A draft tree's rows, each alone (items: row, kv head) over its own branch: the same
// segments, key blocks and merges as the branch's token decoded by itself.
void CpuBlocks::attend_tree(int64_t il, const SeqRows& seq, bool swa, float kq_scale) {
  const int64_t n = seq.n_tokens, n_kv = hp_.n_head_kv;
  branches_.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t>& b = branches_[static_cast<size_t>(t)];
    b.clear();
    for (int32_t node = static_cast<int32_t>(seq.pos + t - seq.tree_base); node >= 0;
         node = seq.tree_parent[node]) {
      b.push_back(node);
    }
    std::reverse(b.begin(), b.end());
  }
  std::atomic<int64_t> next{0};
  ctx_.pool().run([&](int ith, int) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n * n_kv;) {
      const int64_t t = i / n_kv;
      attend_block(il, seq, i % n_kv, t, t + 1, swa, kq_scale, ith,
                   branches_[static_cast<size_t>(t)]);
    }
  });
}

compute::KvRows CpuBlocks::gather_branch(int64_t il, const SeqRows& seq, int64_t g, bool keys,
                                         int64_t first, int64_t n, std::span<const int32_t> branch,
                                         AttnScratch& s) const {
  const int64_t width = keys ? hp_.head_dim : hp_.head_dim_v;
  const size_t row = static_cast<size_t>(width) * (seq.kv->is_f32() ? 4 : 2);
  uint8_t* out = (keys ? s.gathered_k : s.gathered_v).data();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t p = first + j, i = p - seq.tree_base;
    const int64_t slot = i >= 0 && i < static_cast<int64_t>(branch.size())
                             ? seq.tree_base + branch[static_cast<size_t>(i)]
                             : p;
    const compute::KvRows src = keys ? seq.kv->k_rows(il, g, slot) : seq.kv->v_rows(il, g, slot);
    std::memcpy(out + static_cast<size_t>(j) * row, src.data, row);
  }
  return compute::KvRows{out, width, !seq.kv->is_f32()};
}

void CpuBlocks::clear_partial(const Partial& p, int64_t n_rows) const {
  std::fill(p.m, p.m + n_rows, -INFINITY);
  std::fill(p.l, p.l + n_rows, 0.0);
  std::fill(p.acc, p.acc + n_rows * hp_.head_dim_v, 0.0f);
}

// total <- softmax-merge(total, part), row by row. A side with nothing summed is skipped
// or copied, so the first segment of a row lands unchanged whichever path merges it.
void CpuBlocks::merge_partial(const Partial& total, const Partial& part, int64_t n_rows) const {
  const int64_t dv = hp_.head_dim_v;
  for (int64_t r = 0; r < n_rows; ++r) {
    if (part.l[r] == 0) continue;
    float* acc = total.acc + r * dv;
    const float* add = part.acc + r * dv;
    if (total.l[r] == 0) {
      total.m[r] = part.m[r];
      total.l[r] = part.l[r];
      std::copy(add, add + dv, acc);
      continue;
    }
    const float m = std::fmax(total.m[r], part.m[r]);
    const float a = std::exp(total.m[r] - m), b = std::exp(part.m[r] - m);
    total.m[r] = m;
    total.l[r] = total.l[r] * a + part.l[r] * b;
    for (int64_t c = 0; c < dv; ++c) acc[c] = acc[c] * a + add[c] * b;
  }
}

// The softmax partial of query rows t in [t0, t1) (every q head of kv head g; row r is
// token t0 + r / n_gqa, head g * n_gqa + r % n_gqa) over the keys of segment `seg`.
// Key blocks are widened from their aligned start, whatever the first visible key, so
// the kernel's lanes always follow absolute positions.
void CpuBlocks::segment_partial(int64_t il, const SeqRows& seq, int64_t g, int64_t t0, int64_t t1,
                                int64_t seg, bool swa, float kq_scale, AttnScratch& s,
                                const Partial& out, std::span<const int32_t> branch) {
  const int64_t d = hp_.head_dim, dv = hp_.head_dim_v;
  const int64_t n_gqa = hp_.n_head / hp_.n_head_kv;
  const int64_t n_rows = (t1 - t0) * n_gqa;
  auto first_key = [&](int64_t p) { return swa ? std::max<int64_t>(0, p - hp_.n_swa + 1) : 0; };
  clear_partial(out, n_rows);
  // Keys any row may see, within the segment.
  const int64_t lo = std::max(first_key(seq.position(t0)), seg * kKeySegment);
  const int64_t hi = std::min(seq.position(t1 - 1), (seg + 1) * kKeySegment - 1);
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t t = t0 + r / n_gqa, h = g * n_gqa + r % n_gqa;
    s.q_rows[r] = q() + ((seq.row0 + t) * hp_.n_head + h) * d;
  }
  const compute::AttentionRows rows{n_rows,      d,           dv,    kq_scale, s.q_rows.data(),
                                    s.lo.data(), s.hi.data(), out.m, out.l,    out.acc};
  // Values widened once per block for a tile's many rows; a few rows (a decode step)
  // read the cache's rows directly. Widening is exact, so both give the same bits.
  const bool widen_values = n_rows > kWidenValuesRows;
  for (int64_t kb = lo / kKeyBlock * kKeyBlock; kb <= hi; kb += kKeyBlock) {
    const int64_t n_keys = std::min(kb + kKeyBlock, hi + 1) - kb;
    const bool gather = !branch.empty() && kb + n_keys > seq.tree_base;
    ctx_.widen_keys(
        gather ? gather_branch(il, seq, g, true, kb, n_keys, branch, s) : seq.kv->k_rows(il, g, kb),
        n_keys, d, s.keys.data());
    compute::KvRows values = gather ? gather_branch(il, seq, g, false, kb, n_keys, branch, s)
                                    : seq.kv->v_rows(il, g, kb);
    if (widen_values) {
      ctx_.widen_rows(values, n_keys, dv, s.values.data());
      values = compute::KvRows{s.values.data(), dv, false};
    }
    for (int64_t r = 0; r < n_rows; ++r) {
      const int64_t p = seq.position(t0 + r / n_gqa);
      const int64_t j0 = std::max({kb, lo, first_key(p)}), j1 = std::min(kb + n_keys, p + 1);
      s.lo[r] = static_cast<int32_t>(j0 - kb);
      s.hi[r] = static_cast<int32_t>(std::max(j0, j1) - kb);
    }
    ctx_.attention_step(rows, s.keys.data(), values, n_keys);
  }
}

// attn() rows of the sequence's tokens [t0, t1), every q head of kv head g: acc / l. A
// head's sink joins the merged partial last, as one more logit whose value is zero.
void CpuBlocks::write_attention(const SeqRows& seq, int64_t g, int64_t t0, int64_t t1,
                                const Partial& total) {
  const int64_t dv = hp_.head_dim_v, n_gqa = hp_.n_head / hp_.n_head_kv;
  for (int64_t r = 0; r < (t1 - t0) * n_gqa; ++r) {
    const int64_t t = t0 + r / n_gqa, h = g * n_gqa + r % n_gqa;
    float* out = attn() + ((seq.row0 + t) * hp_.n_head + h) * dv;
    double l = total.l[r];
    float acc_scale = 1.0f;
    if (sinks_ != nullptr && l > 0) {
      const float sink = sinks_[h], m = std::fmax(total.m[r], sink);
      acc_scale = std::exp(total.m[r] - m);
      l = l * acc_scale + std::exp(sink - m);
    }
    const float inv = l > 0 ? static_cast<float>(acc_scale / l) : 0.0f;
    for (int64_t c = 0; c < dv; ++c) out[c] = total.acc[r * dv + c] * inv;
  }
}

// Query rows t in [t0, t1) of every q head of kv head g: the segments' partials merged in
// order, then normalised.
void CpuBlocks::attend_block(int64_t il, const SeqRows& seq, int64_t g, int64_t t0, int64_t t1,
                             bool swa, float kq_scale, int thread,
                             std::span<const int32_t> branch) {
  AttnScratch& s = attn_scratch_[thread];
  const int64_t n_rows = (t1 - t0) * (hp_.n_head / hp_.n_head_kv);
  const Partial total{s.m.data(), s.l.data(), s.acc.data()};
  const Partial seg_part{s.seg_m.data(), s.seg_l.data(), s.seg_acc.data()};
  clear_partial(total, n_rows);
  const int64_t first = swa ? std::max<int64_t>(0, seq.position(t0) - hp_.n_swa + 1) : 0;
  for (int64_t seg = first / kKeySegment; seg * kKeySegment <= seq.position(t1 - 1); ++seg) {
    segment_partial(il, seq, g, t0, t1, seg, swa, kq_scale, s, seg_part, branch);
    merge_partial(total, seg_part, n_rows);
  }
  write_attention(seq, g, t0, t1, total);
}

void CpuBlocks::dense_ffn(const FfnViews& w, FfnAct act, const float* in, float* out) {
  gated_ffn(ctx_, w.gate, w.up, w.down, act, in, n_tokens_, ff_gate_.data(), ff_up_.data(), out);
}

// Router: each row's logits (router_probs_) to its selected experts and weights.
void CpuBlocks::route(const WeightView& bias) {
  const int64_t ne = hp_.n_expert, k = hp_.n_expert_used;
  for (int64_t t = 0; t < n_tokens_; ++t) {
    route_row(hp_, router_probs_.data() + t * ne, as_floats(bias), route_scratch_.data(),
              selected_.data() + t * k, selected_w_.data() + t * k);
  }
}

// out = rows' (n_tokens, n_embd) last row of each sequence in order, or its last n_logits
// rows (logit_rows).
void CpuBlocks::gather_last_rows(const float* rows, float* out, bool logit_rows) const {
  const int64_t e = hp_.n_embd;
  for (const SeqRows& s : seqs_) {
    const int64_t n = logit_rows ? s.n_logits : 1;
    out = std::copy_n(rows + (s.row0 + s.n_tokens - n) * e, n * e, out);
  }
}

// The provider's look at each sequence's last row, when it watches the routing.
void CpuBlocks::observe_last_rows(int64_t il, const float* in) {
  ExpertRouting* routing = provider_.routing();
  if (routing == nullptr) return;
  const auto n = static_cast<int64_t>(seqs_.size());
  gather_last_rows(in, last_rows_.data());
  routing->observe_hidden(static_cast<int>(il), std::span(last_rows_.data(), n * hp_.n_embd), n);
}

Status CpuBlocks::moe_ffn(int64_t il, const FfnViews& w, const float* in, float* out) {
  const auto scope = timed("moe routing, experts' waits and sums");
  observe_last_rows(il, in);
  linear(w.router, in, router_probs_.data());
  // gpt-oss's router bias shifts the logits themselves (exp_probs_b only the selection).
  if (w.router_b.data != nullptr) {
    for (int64_t t = 0; t < n_tokens_; ++t)
      compute::add(router_probs_.data() + t * hp_.n_expert, as_floats(w.router_b), hp_.n_expert);
  }
  route(w.exp_probs_b);
  const ExpertTensors tensors{w.gate_exps,
                              w.up_exps,
                              w.down_exps,
                              as_floats(w.gate_exps_b),
                              as_floats(w.up_exps_b),
                              as_floats(w.down_exps_b)};
  // The shared expert reads in before out (which may alias it) is written.
  const bool shared = w.down_shexp.data != nullptr;
  const SharedExpert shexp{&w.gate_shexp,   &w.up_shexp,   &w.down_shexp,
                           ff_gate_.data(), ff_up_.data(), shared_out_.data()};
  HYPURA_RETURN_IF_ERROR(experts_->run(il, tensors, in, n_tokens_, selected_.data(),
                                       selected_w_.data(), slot_out_.data(),
                                       shared ? &shexp : nullptr));
  const int64_t k = hp_.n_expert_used, e = hp_.n_embd;
  for (int64_t t = 0; t < n_tokens_; ++t) {
    const float* slots = slot_out_.data() + t * k * e;
    float* o = out + t * e;
    std::memcpy(o, slots, static_cast<size_t>(e) * sizeof(float));
    for (int64_t slot = 1; slot < k; ++slot) compute::add(o, slots + slot * e, e);
    if (shared) compute::add(o, shared_out_.data() + t * e, e);
  }
  return Status::ok();
}

}  // namespace hypura::model
