// Rotary position embedding on the GPU, the twin of compute::rope (normal and NeoX pair
// order, freq_scale, optional per-pair freq_factors). theta advances by repeated float
// multiplication exactly as on the CPU; only cos/sin may differ by an ulp.
#pragma once

#include <cstdint>

#include "compute/cuda/attention.h"
#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

struct RopeParams {
  int64_t head_dim = 0;
  int64_t n_rot = 0;  // dims n_rot..head_dim pass through
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // (n_rot / 2) device floats, or nullptr
  bool neox = false;
  // YaRN (compute::rope_yarn): ext_factor != 0 blends the interpolated and original angles
  // of pairs between corr_lo and corr_hi; cos and sin are multiplied by mscale (the
  // attention factor times 1 + 0.1 ln(1 / freq_scale) with YaRN).
  float ext_factor = 0.0f;
  float corr_lo = 0.0f, corr_hi = 0.0f;
  float mscale = 1.0f;
};

// x: n_tokens rows of n_head heads of head_dim floats, rows token_stride floats apart,
// rotated in place; pos: (n_tokens) device int32 positions.
void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t token_stride, const int32_t* pos,
          const RopeParams& p, StreamHandle stream);
// rope() of q (n_head_q heads per row) and k (n_head_k) in one launch, rows of each packed
// (token stride n_head * head_dim).
void rope_qk(float* q, int64_t n_head_q, float* k, int64_t n_head_k, int64_t n_tokens,
             const int32_t* pos, const RopeParams& p, StreamHandle stream);

// A decode step's rope_qk and store_kv_f16_seqs in one launch: row t of q and k (sequence
// t's one token, rows packed) rotated in place, and row t's keys (rotated) and values
// (v_width floats; 0: keys only) stored at pos[t] of seqs.k[t] / seqs.v[t]: the same
// floats and halves as the two launches.
void rope_qk_store_seqs(float* q, int64_t n_head_q, float* k, int64_t n_head_k, const float* v,
                        int64_t v_width, const int32_t* pos, const RopeParams& p,
                        const AttnSeqs& seqs, StreamHandle stream);

}  // namespace hypura::compute::cuda
