// Launchers of the activation quantizers: float activations to the 8-bit formats the
// quantized matrix-vector kernels read (act_q8.h), rounded exactly as the CPU rounds them
// (quant::quantize_row_q8_0 / q8_1 / q8_k), so a GPU product sees the same quants as the
// CPU's.
//
// All pointers are device memory; work is queued on `stream`.
#pragma once

#include <cstdint>

#include "compute/cuda/act_q8.h"
#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

enum class ActFormat { kQ8_0, kQ8_1, kQ8_K };

// x: (n) floats. scratch: act_q8_layout(n).total bytes, 256-byte aligned.
// REQUIRES: n % 32 == 0 (kQ8_K: n % 256 == 0).
ActQ8 quantize_act(ActFormat format, const float* x, int64_t n, void* scratch, StreamHandle stream);

// The activations rounded as quantize_act(format) rounds them, as F16: out[i] = q[i] * d
// of its block (nearest even), the quants never stored; out: (n) device halves. The
// prefill products multiply these, so their activations carry the CPU's 8-bit rounding and
// lose only the F16 rounding of each value. REQUIRES: n % 256 == 0 for kQ8_K, n % 32 == 0
// otherwise.
void quantize_to_f16(ActFormat format, const float* x, int64_t n, uint16_t* out,
                     StreamHandle stream);

}  // namespace hypura::compute::cuda
