// Scalar twins of the attention kernels: the reference the SIMD versions are tested
// against, and the path on CPUs without AVX2.
//
// One online-softmax step (flash attention's inner loop) for each query row:
//   1. scores s_j = (q . k_j) * scale for the visible keys, their maximum;
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

// q . k in 8 fixed lanes, then a fixed pairwise sum (one order for every caller).
float dot_lanes(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
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

void attention_step(const AttentionRows& rows, const float* keys, const float* values,
                    int64_t n_keys) {
  const int64_t d = rows.head_dim, dv = rows.head_dim_v;
  float s[kAttnMaxKeys];
  for (int64_t r = 0; r < rows.n_rows; ++r) {
    const int32_t lo = rows.lo[r], hi = rows.hi[r];
    if (lo >= hi) continue;
    float block_max = -INFINITY;
    for (int32_t j = lo; j < hi; ++j) {
      s[j] = dot_lanes(rows.q[r], keys + j * d, d) * rows.scale;
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
      const float* vj = values + j * dv;
      for (int64_t c = 0; c < dv; ++c) acc[c] += e * vj[c];
    }
    rows.l[r] += fold_lanes(lane);
  }
  (void)n_keys;
}

}  // namespace hypura::compute::ref
