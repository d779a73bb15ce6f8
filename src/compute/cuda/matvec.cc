// matvec(): quantizes the activations to the weight type's activation format, then runs
// the kernel of the weight's format family (matvec_float.cu, matvec_legacy.cu,
// matvec_kquant.cu).
#include "compute/cuda/matvec.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>

#include "compute/cuda/matvec_launch.h"
#include "compute/cuda/quantize.h"
#include "quant/quant.h"

namespace hypura::compute::cuda {

bool matvec_supported(gguf::GgmlType type) {
  using T = gguf::GgmlType;
  switch (type) {
    case T::F32:
    case T::F16:
    case T::BF16:
    case T::Q4_0:
    case T::Q4_1:
    case T::Q5_0:
    case T::Q5_1:
    case T::Q8_0:
    case T::MXFP4:
    case T::Q2_K:
    case T::Q3_K:
    case T::Q4_K:
    case T::Q5_K:
    case T::Q6_K:
      return true;
    default:
      return false;
  }
}

size_t matvec_scratch_bytes(int64_t n_cols) {
  return act_q8_layout(n_cols).total;
}

ActQ8 quantize_for(gguf::GgmlType type, const float* x, int64_t n_cols, void* scratch,
                   StreamHandle stream) {
  switch (quant::activation_type(type)) {
    case gguf::GgmlType::Q8_0:
      return quantize_act(ActFormat::kQ8_0, x, n_cols, scratch, stream);
    case gguf::GgmlType::Q8_1:
      return quantize_act(ActFormat::kQ8_1, x, n_cols, scratch, stream);
    case gguf::GgmlType::Q8_K:
      return quantize_act(ActFormat::kQ8_K, x, n_cols, scratch, stream);
    default: {
      ActQ8 act;
      act.x = x;
      return act;
    }
  }
}

namespace {

MatvecArgs args_for(const WeightView& w, const ActQ8& act, float* y, StreamHandle stream) {
  assert(matvec_supported(w.type));
  assert(w.n_cols % quant::block_size(w.type) == 0);
  MatvecArgs a;
  a.w = w.data;
  a.row_bytes = w.row_bytes();
  a.n_cols = w.n_cols;
  a.n_rows = w.n_rows;
  a.act = act;
  a.y = y;
  a.stream = stream;
  return a;
}

// The kernel family of the weight's format.
void launch(gguf::GgmlType type, const MatvecArgs& a) {
  const auto id = static_cast<uint32_t>(type);
  const bool launched =
      launch_matvec_kquant(id, a) || launch_matvec_legacy(id, a) || launch_matvec_float(id, a);
  assert(launched);
  (void)launched;
}

}  // namespace

void matvec_quantized(const WeightView& w, const ActQ8& act, float* y, StreamHandle stream,
                      float* add_to) {
  MatvecArgs a = args_for(w, act, y, stream);
  a.add_to = add_to;
  launch(w.type, a);
}

namespace {
// Elements per activation scale: 256 for Q8_K, 32 for Q8_0 / Q8_1 (0: float activations).
int64_t act_block(gguf::GgmlType type) {
  switch (quant::activation_type(type)) {
    case gguf::GgmlType::Q8_K:
      return 256;
    case gguf::GgmlType::Q8_0:
    case gguf::GgmlType::Q8_1:
      return 32;
    default:
      return 0;
  }
}
}  // namespace

ActQ8 act_row(const ActQ8& act, gguf::GgmlType type, int64_t n_cols, int64_t r) {
  ActQ8 row = act;
  const int64_t block = act_block(type);
  if (row.x != nullptr) row.x += r * n_cols;
  if (block == 0) return row;
  row.q += r * n_cols;
  row.d += r * (n_cols / block);
  if (row.s != nullptr) row.s += r * (n_cols / 32);
  return row;
}

namespace {
void launch_grouped(const WeightView& expert, const WeightView* second, int64_t n_experts,
                    const int32_t* ids, int64_t n_pairs, int act_div, const ActQ8& act, float* y,
                    float* y_second, StreamHandle stream) {
  if (n_pairs == 0) return;
  MatvecGroup group;
  if (second != nullptr) {
    assert(second->type == expert.type && second->n_rows == expert.n_rows &&
           second->n_cols == expert.n_cols);
    group.w_second = static_cast<const uint8_t*>(second->data);
    group.y_second = y_second;
  }
  group.ids = ids;
  group.expert_bytes = expert.row_bytes() * static_cast<size_t>(expert.n_rows);
  group.n_pairs = static_cast<int>(n_pairs);
  group.act_div = act_div;
  group.n_experts = static_cast<int>(n_experts);
  group.q_stride = expert.n_cols;
  const int64_t block = act_block(expert.type);
  group.d_stride = block > 0 ? expert.n_cols / block : 0;
  MatvecArgs a = args_for(expert, act, y, stream);
  a.group = &group;
  launch(expert.type, a);
}
}  // namespace

void matvec_grouped(const WeightView& expert, int64_t n_experts, const int32_t* ids,
                    int64_t n_pairs, int act_div, const ActQ8& act, float* y, StreamHandle stream) {
  launch_grouped(expert, nullptr, n_experts, ids, n_pairs, act_div, act, y, nullptr, stream);
}

void matvec_grouped_pair(const WeightView& first, const WeightView& second, int64_t n_experts,
                         const int32_t* ids, int64_t n_pairs, int act_div, const ActQ8& act,
                         float* y, float* y_second, StreamHandle stream) {
  launch_grouped(first, &second, n_experts, ids, n_pairs, act_div, act, y, y_second, stream);
}

void matvec_pair(const WeightView& w, const WeightView& w_second, const ActQ8& act, float* y,
                 float* y_second, StreamHandle stream) {
  launch_grouped(w, &w_second, 1, nullptr, 1, 1, act, y, y_second, stream);
}

void matvec_batched(const WeightView& w, const ActQ8& act, int64_t n, float* y,
                    StreamHandle stream) {
  assert(n >= 1 && n <= kMatvecMaxTokens);
  MatvecArgs a = args_for(w, act, y, stream);
  a.n_tok = static_cast<int>(n);
  a.q_stride = w.n_cols;
  const int64_t block = act_block(w.type);
  a.d_stride = block > 0 ? w.n_cols / block : 0;
  launch(w.type, a);
}

void matvec(const WeightView& w, const float* x, float* y, void* scratch, StreamHandle stream) {
  matvec_quantized(w, quantize_for(w.type, x, w.n_cols, scratch, stream), y, stream);
}

}  // namespace hypura::compute::cuda
