// The activation functions' device code, shared by unary.cu and the fused kernels (fused.cu).
#pragma once

#include "compute/cuda/common.cuh"
#include "compute/cuda/unary.h"

namespace hypura::compute::cuda {

__device__ __forceinline__ float gelu_tanh_one(float v) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * v * (1.0f + kCoefA * v * v)));
}

template <UnaryOp kOp>
__device__ __forceinline__ float apply(float v) {
  if constexpr (kOp == UnaryOp::kSilu) {
    return v / (1.0f + expf(-v));
  } else if constexpr (kOp == UnaryOp::kGeluTanh) {
    return gelu_tanh_one(v);
  } else if constexpr (kOp == UnaryOp::kGeluTanhFp16) {
    if (v <= -10.0f) return 0.0f;
    return v < 10.0f ? round_fp16(gelu_tanh_one(round_fp16(v))) : v;
  } else {
    return v;  // kSwigluOai: gated only (glu_one)
  }
}

// One gated activation: op(gate) * up, or the clamped SwiGLU (compute::swiglu_oai).
template <UnaryOp kOp>
__device__ __forceinline__ float glu_one(float gate, float up) {
  if constexpr (kOp == UnaryOp::kSwigluOai) {
    constexpr float kAlpha = 1.702f, kLimit = 7.0f;  // compute::kSwigluOaiAlpha / Limit
    const float g = fminf(gate, kLimit);
    const float u = fminf(fmaxf(up, -kLimit), kLimit);
    return g / (1.0f + expf(kAlpha * -g)) * (u + 1.0f);
  } else {
    return apply<kOp>(gate) * up;
  }
}

}  // namespace hypura::compute::cuda
