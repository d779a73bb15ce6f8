// HostExperts: a MoE layer's routed experts computed on the CPU, from weights in host
// memory (RAM, or read on demand by an expert-streaming provider).
//
// Given a batch's normalized FFN rows and each row's selected experts, it runs every used
// expert once over the rows routed to it (gate and up in one pool job, the gated
// activation, down) and writes each (row, slot) pair's output to its own row, so the
// caller sums the slots in slot order whatever order the experts ran in. Two users:
//   CpuBlocks        every MoE layer of a model on the CPU
//   CudaBlocks       the layers of a GPU model whose experts stay in RAM (the planner's
//                    expert split, llama.cpp's --n-cpu-moe): the GPU computes attention
//                    and routing, copies the rows down, this computes the experts, the
//                    slot outputs go back up (cuda_blocks.h)
// The provider's routing hooks (route, order_experts) are called as the WeightProvider
// contract describes, so a streaming provider overlaps its reads with the compute.
//
// Thread-safety: one run() at a time; the context's pool parallelises inside, and no
// other user of the context may run meanwhile.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "compute/compute.h"
#include "model/blocks.h"

namespace hypura::model {

// gate[0..n) = act(gate) * up, in chunks across the context's pool (elementwise: the
// values do not depend on the split).
void gated_activation(compute::Context& ctx, FfnAct act, float* gate, const float* up, int64_t n);

// out = down(act(gate . in) * (up . in)) over n_rows rows (a dense FFN, a shared expert):
// gate and up in one pool job, the activation, down. gate_buf, up_buf: (n_rows,
// gate.n_rows) scratch. in and out may alias.
void gated_ffn(compute::Context& ctx, const WeightView& gate, const WeightView& up,
               const WeightView& down, FfnAct act, const float* in, int64_t n_rows, float* gate_buf,
               float* up_buf, float* out);

// A MoE layer's shared expert (SiLU-gated), computed with the routed experts: out (n_rows,
// n_embd). gate_buf, up_buf: (n_rows, gate->n_rows) scratch of the caller's for batches
// that do not take the one-row path.
struct SharedExpert {
  const WeightView *gate = nullptr, *up = nullptr, *down = nullptr;
  float *gate_buf = nullptr, *up_buf = nullptr;
  float* out = nullptr;
};

// The stacked expert tensors of one layer (model/weights.h's ffn_*_exps), and their
// biases when the model has them (host F32 (width, n_expert): expert e adds row e).
struct ExpertTensors {
  TensorId gate = kNone, up = kNone, down = kNone;
  const float *gate_b = nullptr, *up_b = nullptr, *down_b = nullptr;
};

class HostExperts {
 public:
  // max_rows: most rows per run(); the context and provider must outlive this.
  HostExperts(const HParams& hp, compute::Context& ctx, WeightProvider& provider, int64_t max_rows);

  WeightProvider& provider() { return provider_; }

  // slot_out (n_rows, n_expert_used, n_embd): row t's slot s = expert selected[t, s] applied
  // to in row t, times weights[t, s] when weights is not null. in: (n_rows, n_embd);
  // selected: (n_rows, n_expert_used) expert ids. shared (optional): the layer's shared
  // expert, whose output goes to shared->out (a decode step runs it in the routed experts'
  // pool jobs). Returns the provider's error, if any.
  // REQUIRES: n_rows <= max_rows, ids < n_expert; shared->gate->n_rows <= hp.n_ff_shexp().
  Status run(int64_t il, const ExpertTensors& t, const float* in, int64_t n_rows,
             const int32_t* selected, const float* weights, float* slot_out,
             const SharedExpert* shared = nullptr);

 private:
  Status run_one_row(int64_t il, const ExpertTensors& t, const float* in, const int32_t* selected,
                     const float* weights, float* slot_out, const SharedExpert* shared);
  // gate/up rows (n_rows, n_ff_expert) of expert ids[r] += their biases, then the activation
  // of those rows and of `extra` more values after them (a shared expert's, same activation).
  void activate(const ExpertTensors& t, const int32_t* ids, int64_t n_rows, int64_t extra);

  const HParams& hp_;
  compute::Context& ctx_;
  WeightProvider& provider_;
  int64_t max_rows_;
  std::vector<ExpertRequest> requests_;  // run_one_row's, (n_expert_used * 3)
  std::vector<WeightView> views_;
  // (max_rows, n_ff_expert), at least (n_expert_used * n_ff_expert + n_ff_shexp): one row's
  // experts side by side, then its shared expert
  std::vector<float> gate_, up_;
  std::vector<float> rows_in_;    // (max_rows, n_embd) gathered rows of one expert
  std::vector<float> rows_out_;   // (max_rows, n_embd)
  std::vector<int32_t> pair_of_;  // (max_rows * n_expert_used) row*k+slot per gathered row
  std::vector<int32_t> ids_;      // (gathered rows) the expert of each, for activate()
  std::vector<int32_t> used_;     // distinct experts of the batch (capacity n_expert)
};

}  // namespace hypura::model
