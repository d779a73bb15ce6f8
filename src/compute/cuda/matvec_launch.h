// Internal: the per-format-family launchers behind matvec() (matvec.cc dispatches; each
// family is one .cu so the three compile in parallel).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/cuda/act_q8.h"
#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

// Grouped products (MoE experts, matvec.h), one per blockIdx.y: pair i multiplies expert
// ids[i] (expert_bytes apart in a stacked tensor) with activation row i / act_div into y
// row i (n_rows apart).
// Most activation rows one batched product (matvec_batched) multiplies per weight read.
constexpr int kMatvecMaxTokens = 16;
struct MatvecGroup {
  const int32_t* ids = nullptr;  // (n_pairs) device; null: one pair, no expert offset
  size_t expert_bytes = 0;
  int n_pairs = 0, act_div = 1;
  int n_experts = 0;  // matrices in the stacked tensor (ids < n_experts); 0: unknown
  int64_t q_stride = 0, d_stride = 0;  // quants / scales between activation rows
  // A second stacked tensor of the same type and shape on the same pairs (up beside gate):
  // blockIdx.z 1 multiplies it into y_second. Null: one tensor.
  const uint8_t* w_second = nullptr;
  float* y_second = nullptr;
};

struct MatvecArgs {
  const void* w = nullptr;  // (n_rows) rows of row_bytes, 16-byte aligned
  size_t row_bytes = 0;
  int64_t n_cols = 0, n_rows = 0;
  ActQ8 act;           // quantized activations or act.x (float formats)
  float* y = nullptr;  // (n_rows)
  // Not null: the residual rows the products are also added to (add_to[i] += y[i], the same
  // float addition as compute::add). Single-token products only.
  float* add_to = nullptr;
  StreamHandle stream = nullptr;
  const MatvecGroup* group = nullptr;  // null: one product
  // Batched products: n_tok activation rows (q_stride / d_stride apart, as in MatvecGroup)
  // into y rows n_rows apart; 1: one product.
  int n_tok = 1;
  int64_t q_stride = 0, d_stride = 0;
};

// type_id: the GGUF type id (gguf::GgmlType). Each returns false for ids it lacks.
bool launch_matvec_float(uint32_t type_id, const MatvecArgs& a);   // F32, F16, BF16
bool launch_matvec_legacy(uint32_t type_id, const MatvecArgs& a);  // Q4_0 .. Q8_0, MXFP4
bool launch_matvec_kquant(uint32_t type_id, const MatvecArgs& a);  // Q2_K .. Q6_K

}  // namespace hypura::compute::cuda
