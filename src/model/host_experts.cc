#include "model/host_experts.h"

#include <algorithm>
#include <cstring>

#include "compute/cpu/thread_pool.h"
#include "compute/op_profile.h"
#include "model/weight_provider.h"

namespace hypura::model {

void gated_activation(compute::Context& ctx, FfnAct act, float* gate, const float* up, int64_t n) {
  const compute::OpProfile::Scope scope(ctx.op_profile(), {"ffn activation"});
  constexpr int64_t kChunk = 1024;
  const auto chunks = [&](int64_t c0, int64_t c1) {
    const int64_t begin = c0 * kChunk, len = std::min(c1 * kChunk, n) - begin;
    float* g = gate + begin;
    if (act == FfnAct::kSwigluOai) {
      compute::swiglu_oai(g, up + begin, len, compute::kSwigluOaiAlpha, compute::kSwigluOaiLimit);
      return;
    }
    if (act == FfnAct::kSilu) {
      ctx.silu_mul(g, up + begin, len);
      return;
    }
    // ggml's CPU GELU rounds input and output through fp16; so do we, to match it.
    ctx.gelu_mul(g, up + begin, len);
  };
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
  if (n_chunks < 2 || ctx.n_threads() == 1) {
    chunks(0, n_chunks);
    return;
  }
  ctx.pool().run([&](int ith, int nth) {
    int64_t c0, c1;
    compute::split_range(n_chunks, ith, nth, 1, &c0, &c1);
    if (c0 < c1) chunks(c0, c1);
  });
}

void gated_ffn(compute::Context& ctx, const WeightView& gate, const WeightView& up,
               const WeightView& down, FfnAct act, const float* in, int64_t n_rows, float* gate_buf,
               float* up_buf, float* out) {
  const WeightView* gate_up[] = {&gate, &up};
  float* y[] = {gate_buf, up_buf};
  ctx.matmul_shared(gate_up, y, 2, in, n_rows);
  gated_activation(ctx, act, gate_buf, up_buf, n_rows * gate.n_rows);
  ctx.matmul(down, gate_buf, n_rows, out);
}

HostExperts::HostExperts(const HParams& hp, compute::Context& ctx, WeightProvider& provider,
                         int64_t max_rows)
    : hp_(hp), ctx_(ctx), provider_(provider), max_rows_(max_rows) {
  const auto rows = [&](int64_t width) { return static_cast<size_t>(max_rows * width); };
  const auto ff =
      std::max(rows(hp.n_ff_expert),
               static_cast<size_t>(hp.n_expert_used * hp.n_ff_expert + hp.n_ff_shexp()));
  gate_.resize(ff);
  up_.resize(ff);
  rows_in_.resize(rows(hp.n_embd));
  rows_out_.resize(rows(hp.n_embd));
  pair_of_.resize(rows(1));
  ids_.reserve(static_cast<size_t>(max_rows));
  used_.reserve(static_cast<size_t>(hp.n_expert));
  ctx.reserve(max_rows, std::max(hp.n_embd, hp.n_ff_expert));
}

// The provider learns the routing first and picks the order (order_experts(): what is in
// RAM first); then the experts are acquired one at a time and computed before the next is
// asked for, so a streaming provider overlaps later reads with earlier compute.
Status HostExperts::run(int64_t il, const ExpertTensors& t, const float* in, int64_t n_rows,
                        const int32_t* selected, const float* weights, float* slot_out,
                        const SharedExpert* shared) {
  const int64_t k = hp_.n_expert_used, e = hp_.n_embd;
  if (n_rows == 1 && provider_.routing() == nullptr)
    return run_one_row(il, t, in, selected, weights, slot_out, shared);
  used_.assign(selected, selected + n_rows * k);
  std::sort(used_.begin(), used_.end());
  used_.erase(std::unique(used_.begin(), used_.end()), used_.end());
  if (ExpertRouting* routing = provider_.routing()) {
    routing->route(static_cast<int>(il), std::span(selected, static_cast<size_t>(n_rows * k)),
                   static_cast<int>(k));
    routing->order_experts(static_cast<int>(il), used_);  // outputs go to per-slot rows: any order
  }
  for (int32_t id : used_) {
    const ExpertRequest requests[3] = {{t.gate, id}, {t.up, id}, {t.down, id}};
    WeightView views[3];
    {
      const compute::OpProfile::Scope wait(ctx_.op_profile(), {"expert weights wait"});
      HYPURA_RETURN_IF_ERROR(provider_.acquire_experts(static_cast<int>(il), requests, views));
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n_rows * k; ++i) {
      if (selected[i] != id) continue;
      pair_of_[static_cast<size_t>(m)] = static_cast<int32_t>(i);
      std::memcpy(rows_in_.data() + m * e, in + (i / k) * e, static_cast<size_t>(e) * 4);
      ++m;
    }
    const WeightView* gate_up[] = {&views[0], &views[1]};
    float* outs[] = {gate_.data(), up_.data()};
    ctx_.matmul_shared(gate_up, outs, 2, rows_in_.data(), m);
    ids_.assign(static_cast<size_t>(m), id);
    activate(t, ids_.data(), m, 0);
    ctx_.matmul(views[2], gate_.data(), m, rows_out_.data());
    for (int64_t r = 0; r < m; ++r) {
      const int32_t i = pair_of_[static_cast<size_t>(r)];  // row * k + slot
      float* dst = slot_out + static_cast<int64_t>(i) * e;
      std::memcpy(dst, rows_out_.data() + r * e, static_cast<size_t>(e) * 4);
      if (t.down_b != nullptr) compute::add(dst, t.down_b + static_cast<int64_t>(id) * e, e);
      if (weights != nullptr) compute::scale(dst, weights[i], e);
    }
  }
  if (shared != nullptr) {
    gated_ffn(ctx_, *shared->gate, *shared->up, *shared->down, FfnAct::kSilu, in, n_rows,
              shared->gate_buf, shared->up_buf, shared->out);
  }
  return Status::ok();
}

// One row (a decode step): every selected expert and the shared expert read the same
// input, so their gate and up products share pool jobs (matmul_shared, up to
// kMaxSharedProducts products each), one pass applies the activation to all, and the downs
// run as one job too (matmul_many). Each product is bit for bit the one run() computes
// expert by expert. The views of all the experts are taken in one call, which a provider
// without on-demand reads serves from memory (routing() null: nothing to overlap).
Status HostExperts::run_one_row(int64_t il, const ExpertTensors& t, const float* in,
                                const int32_t* selected, const float* weights, float* slot_out,
                                const SharedExpert* shared) {
  const int64_t k = hp_.n_expert_used, e = hp_.n_embd, ff = hp_.n_ff_expert;
  requests_.clear();
  for (int64_t s = 0; s < k; ++s) {
    for (TensorId id : {t.gate, t.up, t.down}) requests_.push_back({id, selected[s]});
  }
  views_.resize(requests_.size());
  {
    const compute::OpProfile::Scope wait(ctx_.op_profile(), {"expert weights wait"});
    HYPURA_RETURN_IF_ERROR(provider_.acquire_experts(static_cast<int>(il), requests_, views_));
  }
  // Products in order: expert s's gate, up, down at views_[3s..3s+2], then the shared
  // expert's as product k; gate and up rows of product s at s * ff.
  const int64_t n_products = k + (shared != nullptr ? 1 : 0);
  const auto part = [&](int64_t s, int p) -> const WeightView* {
    if (s < k) return &views_[static_cast<size_t>(3 * s + p)];
    return p == 0 ? shared->gate : p == 1 ? shared->up : shared->down;
  };
  constexpr int kPerJob = compute::Context::kMaxSharedProducts;
  const WeightView* ws[kPerJob];
  float* outs[kPerJob];
  int n = 0;
  for (int64_t s = 0; s < n_products; ++s) {
    for (int p = 0; p < 2; ++p) {  // gate, up
      ws[n] = part(s, p);
      outs[n++] = (p == 0 ? gate_.data() : up_.data()) + s * ff;
      if (n == kPerJob) {
        ctx_.matmul_shared(ws, outs, n, in, 1);
        n = 0;
      }
    }
  }
  if (n > 0) ctx_.matmul_shared(ws, outs, n, in, 1);
  const int64_t ff_shared = shared != nullptr ? shared->gate->n_rows : 0;
  if (shared != nullptr && hp_.expert_act == FfnAct::kSilu) {
    activate(t, selected, k, ff_shared);  // the shared expert's rows in the same pass
  } else {
    activate(t, selected, k, 0);
    if (shared != nullptr)
      gated_activation(ctx_, FfnAct::kSilu, gate_.data() + k * ff, up_.data() + k * ff, ff_shared);
  }
  const float* xs[kPerJob];
  for (int64_t s0 = 0; s0 < n_products; s0 += kPerJob) {
    const int m = static_cast<int>(std::min<int64_t>(kPerJob, n_products - s0));
    for (int i = 0; i < m; ++i) {
      const int64_t s = s0 + i;
      ws[i] = part(s, 2);
      xs[i] = gate_.data() + s * ff;
      outs[i] = s < k ? slot_out + s * e : shared->out;
    }
    ctx_.matmul_many(ws, xs, outs, m, 1);
  }
  for (int64_t s = 0; s < k; ++s) {
    float* dst = slot_out + s * e;
    if (t.down_b != nullptr) compute::add(dst, t.down_b + static_cast<int64_t>(selected[s]) * e, e);
    if (weights != nullptr) compute::scale(dst, weights[s], e);
  }
  return Status::ok();
}

void HostExperts::activate(const ExpertTensors& t, const int32_t* ids, int64_t n_rows,
                           int64_t extra) {
  const int64_t ff = hp_.n_ff_expert;
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t off = static_cast<int64_t>(ids[r]) * ff;
    if (t.gate_b != nullptr) compute::add(gate_.data() + r * ff, t.gate_b + off, ff);
    if (t.up_b != nullptr) compute::add(up_.data() + r * ff, t.up_b + off, ff);
  }
  gated_activation(ctx_, hp_.expert_act, gate_.data(), up_.data(), n_rows * ff + extra);
}

}  // namespace hypura::model
