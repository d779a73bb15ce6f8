// Activation functions on the GPU, in place on n device floats: the twins of
// compute::silu, gelu_tanh and gelu_tanh_fp16 (input and result rounded through fp16 as
// ggml's CPU GELU table does), and compute::swiglu_oai (gated only).
#pragma once

#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

enum class UnaryOp { kSilu, kGeluTanh, kGeluTanhFp16, kSwigluOai };

// REQUIRES: op is not kSwigluOai (it needs up).
void unary(UnaryOp op, float* x, int64_t n, StreamHandle stream);
// Gated activation: gate[i] = op(gate[i]) * up[i] for i < n (the CPU's op, then its multiply);
// kSwigluOai: compute::swiglu_oai with gpt-oss's constants.
void glu(UnaryOp op, float* gate, const float* up, int64_t n, StreamHandle stream);

}  // namespace hypura::compute::cuda
