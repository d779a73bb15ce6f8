// Scalar twins of the attention kernels: the reference the SIMD versions are tested
// against, and the path on CPUs without AVX2.
//
// One online-softmax step (flash attention's inner loop) for each query row:
//   1. scores s_j = (q . k_j) * scale for the visible keys (the dot product summed in
//      ascending element order, as the SIMD paths' FMA chains do), their maximum;
//   2. a larger running maximum rescales what was summed so far by exp(m_old - m_new);
//   3. e_j = exp(s_j - m_new) is added to the row's sum (in 8 lanes indexed by the key's
//      position mod 8, folded in a fixed order at the end of the step) and e_j * v_j to
//      the accumulator, keys in ascending order.
// Nothing in a row's arithmetic depends on the other rows of the step, nor on which keys
// of the block other rows see, so a query gives the same result in any batch.
#include <cmath>

#include "compute/cpu/kernels.h"
#include "quant/fp16.h"

namespace hypura::compute::ref {
namespace {

constexpr int kLanes = 8;

// q . k_j with key j's elements kAttnMaxKeys apart (the transposed block), in order.
float dot_key(const float* q, const float* keys_t, int64_t j, int64_t d) {
  float acc = 0.0f;
  for (int64_t c = 0; c < d; ++c) acc += q[c] * keys_t[c * kAttnMaxKeys + j];
  return acc;
}

float value(const KvRows& v, int64_t j, int64_t c) {
  const int64_t at = j * v.stride + c;
  return v.f16 ? quant::fp16_to_f32(static_cast<const uint16_t*>(v.data)[at])
               : static_cast<const float*>(v.data)[at];
}

float fold_lanes(const float* lane) {
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

}  // namespace

void widen_rows(const KvRows& src, int64_t n_rows, int64_t width, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* o = out + r * width;
    if (src.f16) {
      const uint16_t* in = static_cast<const uint16_t*>(src.data) + r * src.stride;
      for (int64_t c = 0; c < width; ++c) o[c] = quant::fp16_to_f32(in[c]);
    } else {
      const float* in = static_cast<const float*>(src.data) + r * src.stride;
      for (int64_t c = 0; c < width; ++c) o[c] = in[c];
    }
  }
}

void widen_keys(const KvRows& src, int64_t n_keys, int64_t d, float* out) {
  for (int64_t j = 0; j < n_keys; ++j) {
    for (int64_t c = 0; c < d; ++c) {
      out[c * kAttnMaxKeys + j] = value(src, j, c);
    }
  }
}

void attention_step(const AttentionRows& rows, const float* keys_t, const KvRows& values,
                    int64_t n_keys) {
  const int64_t d = rows.head_dim, dv = rows.head_dim_v;
  float s[kAttnMaxKeys];
  for (int64_t r = 0; r < rows.n_rows; ++r) {
    const int32_t lo = rows.lo[r], hi = rows.hi[r];
    if (lo >= hi) continue;
    float block_max = -INFINITY;
    for (int32_t j = lo; j < hi; ++j) {
      s[j] = dot_key(rows.q[r], keys_t, j, d) * rows.scale;
      block_max = std::fmax(block_max, s[j]);
    }
    float* acc = rows.acc + r * dv;
    const float m_new = std::fmax(rows.m[r], block_max);
    if (rows.l[r] > 0 && m_new > rows.m[r]) {
      const float shrink = std::exp(rows.m[r] - m_new);
      rows.l[r] *= shrink;
      for (int64_t c = 0; c < dv; ++c) acc[c] *= shrink;
    }
    rows.m[r] = m_new;
    float lane[kLanes] = {};
    for (int32_t j = lo; j < hi; ++j) {
      const float e = std::exp(s[j] - m_new);
      lane[j % kLanes] += e;
      for (int64_t c = 0; c < dv; ++c) acc[c] += e * value(values, j, c);
    }
    rows.l[r] += fold_lanes(lane);
  }
  (void)n_keys;
}

}  // namespace hypura::compute::ref
