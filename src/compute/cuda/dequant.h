// Dequantization on the GPU: rows of a weight matrix in any format matvec() multiplies,
// widened to F16 (the input of the prefill products, gemm.h) or F32 (embedding lookups),
// the twins of quant::dequantize_row. Each value is computed with the CPU's operations in
// its order (d * sc first, then * q, then - m; no fused multiply-add), so the F32 output
// equals the CPU's bit for bit and the F16 output is that value rounded to nearest even.
//
// All pointers are device memory; work is queued on `stream`.
#pragma once

#include <cstdint>

#include "compute/compute.h"
#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

// out (n_rows, w.n_cols) F16 bits = rows [row0, row0 + n_rows) of w.
// REQUIRES: matvec_supported(w.type); out 16-byte aligned when w.n_cols % 8 == 0.
void dequantize_rows_f16(const WeightView& w, int64_t row0, int64_t n_rows, uint16_t* out,
                         StreamHandle stream);
// out (n_ids, w.n_cols) F32 = rows ids[i] of w (ids: n_ids device int32, each < w.n_rows).
void get_rows_f32(const WeightView& w, const int32_t* ids, int64_t n_ids, float* out,
                  StreamHandle stream);
// out[i] = x[i] rounded to F16 (nearest even), i < n.
void f32_to_f16(const float* x, int64_t n, uint16_t* out, StreamHandle stream);

}  // namespace hypura::compute::cuda
