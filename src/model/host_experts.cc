#include "model/host_experts.h"

#include <algorithm>
#include <cstring>

#include "compute/cpu/thread_pool.h"
#include "model/weight_provider.h"

namespace hypura::model {

void gated_activation(compute::Context& ctx, FfnAct act, float* gate, const float* up, int64_t n) {
  constexpr int64_t kChunk = 1024;
  const auto chunks = [&](int64_t c0, int64_t c1) {
    const int64_t begin = c0 * kChunk, len = std::min(c1 * kChunk, n) - begin;
    float* g = gate + begin;
    if (act == FfnAct::kSwigluOai) {
      compute::swiglu_oai(g, up + begin, len, compute::kSwigluOaiAlpha, compute::kSwigluOaiLimit);
      return;
    }
    if (act == FfnAct::kSilu) {
      compute::silu(g, len);
    } else {
      // ggml's CPU GELU rounds input and output through fp16; so do we, to match it.
      compute::gelu_tanh_fp16(g, len);
    }
    compute::mul(g, up + begin, len);
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

HostExperts::HostExperts(const HParams& hp, compute::Context& ctx, WeightProvider& provider,
                         int64_t max_rows)
    : hp_(hp), ctx_(ctx), provider_(provider), max_rows_(max_rows) {
  const auto rows = [&](int64_t width) { return static_cast<size_t>(max_rows * width); };
  gate_.resize(rows(hp.n_ff_expert));
  up_.resize(rows(hp.n_ff_expert));
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
                        const int32_t* selected, const float* weights, float* slot_out) {
  const int64_t k = hp_.n_expert_used, e = hp_.n_embd;
  if (n_rows == 1 && provider_.routing() == nullptr && k <= max_rows_)
    return run_one_row(il, t, in, selected, weights, slot_out);
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
    HYPURA_RETURN_IF_ERROR(provider_.acquire_experts(static_cast<int>(il), requests, views));
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
    activate(t, ids_.data(), m);
    ctx_.matmul(views[2], gate_.data(), m, rows_out_.data());
    for (int64_t r = 0; r < m; ++r) {
      const int32_t i = pair_of_[static_cast<size_t>(r)];  // row * k + slot
      float* dst = slot_out + static_cast<int64_t>(i) * e;
      std::memcpy(dst, rows_out_.data() + r * e, static_cast<size_t>(e) * 4);
      if (t.down_b != nullptr) compute::add(dst, t.down_b + static_cast<int64_t>(id) * e, e);
      if (weights != nullptr) compute::scale(dst, weights[i], e);
    }
  }
  return Status::ok();
}

// One row (a decode step): every selected expert reads the same input, so their gate and
// up products share pool jobs (matmul_shared, up to kMaxSharedProducts products each) and
// one job applies the activation to all; only the downs, whose inputs differ, run one by
// one. Each product is bit for bit the one run() computes expert by expert. The views of
// all the experts are taken in one call, which a provider without on-demand reads serves
// from memory (routing() null: nothing to overlap).
Status HostExperts::run_one_row(int64_t il, const ExpertTensors& t, const float* in,
                                const int32_t* selected, const float* weights, float* slot_out) {
  const int64_t k = hp_.n_expert_used, e = hp_.n_embd, ff = hp_.n_ff_expert;
  requests_.clear();
  for (int64_t s = 0; s < k; ++s) {
    for (TensorId id : {t.gate, t.up, t.down}) requests_.push_back({id, selected[s]});
  }
  views_.resize(requests_.size());
  HYPURA_RETURN_IF_ERROR(provider_.acquire_experts(static_cast<int>(il), requests_, views_));
  constexpr int kPerJob = compute::Context::kMaxSharedProducts;
  const WeightView* ws[kPerJob];
  float* outs[kPerJob];
  int n = 0;
  for (int64_t s = 0; s < k; ++s) {
    for (int part = 0; part < 2; ++part) {  // gate, up
      ws[n] = &views_[static_cast<size_t>(3 * s + part)];
      outs[n++] = (part == 0 ? gate_.data() : up_.data()) + s * ff;
      if (n == kPerJob) {
        ctx_.matmul_shared(ws, outs, n, in, 1);
        n = 0;
      }
    }
  }
  if (n > 0) ctx_.matmul_shared(ws, outs, n, in, 1);
  activate(t, selected, k);
  for (int64_t s = 0; s < k; ++s) {
    float* dst = slot_out + s * e;
    ctx_.matmul(views_[static_cast<size_t>(3 * s + 2)], gate_.data() + s * ff, 1, dst);
    if (t.down_b != nullptr) compute::add(dst, t.down_b + static_cast<int64_t>(selected[s]) * e, e);
    if (weights != nullptr) compute::scale(dst, weights[s], e);
  }
  return Status::ok();
}

void HostExperts::activate(const ExpertTensors& t, const int32_t* ids, int64_t n_rows) {
  const int64_t ff = hp_.n_ff_expert;
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t off = static_cast<int64_t>(ids[r]) * ff;
    if (t.gate_b != nullptr) compute::add(gate_.data() + r * ff, t.gate_b + off, ff);
    if (t.up_b != nullptr) compute::add(up_.data() + r * ff, t.up_b + off, ff);
  }
  gated_activation(ctx_, hp_.expert_act, gate_.data(), up_.data(), n_rows * ff);
}

}  // namespace hypura::model
