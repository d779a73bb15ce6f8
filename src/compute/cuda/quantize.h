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

// The quantized activations' values q[i] * d[i / block] (block: 32, or 256 for Q8_K) as F16
// (nearest even), out: (n) device halves. The prefill products multiply these, so their
// activations carry the CPU's 8-bit rounding and lose only the F16 rounding of each value.
void act_q8_to_f16(const ActQ8& act, int64_t n, int block, uint16_t* out, StreamHandle stream);

}  // namespace hypura::compute::cuda
