#include <cmath>

#include "compute/cuda/common.cuh"
#include "compute/cuda/rope.h"

namespace hypura::compute::cuda {
namespace {

// Rows of heads to rotate: x, heads per row, floats between rows.
struct RopeTarget {
  float* x;
  int n_head;
  int64_t token_stride;
};

// One thread per (target, token, head, rotated pair): the first target's pairs, then the
// second's (n_first of them).
__global__ void rope_kernel(RopeTarget t0, RopeTarget t1, int n_first, const int32_t* pos,
                            int head_dim, int n_rot, float theta_scale, float freq_scale,
                            const float* freq_factors, bool neox, int n_pairs_total,
                            float ext_factor, float corr_lo, float corr_hi, float mscale) {
  grid_dep_wait();
  grid_dep_launch();
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n_pairs_total) return;
  const bool second = idx >= n_first;
  if (second) idx -= n_first;
  float* x = second ? t1.x : t0.x;
  const int n_head = second ? t1.n_head : t0.n_head;
  const int64_t token_stride = second ? t1.token_stride : t0.token_stride;
  const int half = n_rot / 2;
  const int i = idx % half;
  const int head = (idx / half) % n_head;
  const int t = idx / half / n_head;
  float theta_base = static_cast<float>(pos[t]);
  for (int k = 0; k < i; ++k) theta_base *= theta_scale;  // the CPU's sequence of roundings
  const float ff = freq_factors ? freq_factors[i] : 1.0f;
  const float theta_extrap = theta_base / ff;
  float theta = freq_scale * theta_extrap;
  if (ext_factor != 0.0f) {
    const float r = (static_cast<float>(i) - corr_lo) / fmaxf(0.001f, corr_hi - corr_lo);
    const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, r))) * ext_factor;
    theta = theta * (1.0f - mix) + theta_extrap * mix;
  }
  float s, c;
  sincosf(theta, &s, &c);
  c *= mscale;
  s *= mscale;
  float* h = x + t * token_stride + static_cast<int64_t>(head) * head_dim;
  const int a = neox ? i : 2 * i;
  const int b = neox ? i + half : 2 * i + 1;
  const float x0 = h[a], x1 = h[b];
  h[a] = x0 * c - x1 * s;
  h[b] = x0 * s + x1 * c;
}

void launch_rope(RopeTarget t0, RopeTarget t1, int64_t n_tokens, const int32_t* pos,
                 const RopeParams& p, StreamHandle stream) {
  const int64_t first = n_tokens * t0.n_head * (p.n_rot / 2);
  const int64_t total = first + n_tokens * t1.n_head * (p.n_rot / 2);
  if (total == 0) return;
  // On the host with std::pow, as the CPU computes it, so theta_scale is the same float.
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  const unsigned grid = static_cast<unsigned>((total + 255) / 256);
  launch_kernel(rope_kernel, grid, 256, 0, stream, t0, t1, static_cast<int>(first), pos,
                static_cast<int>(p.head_dim), static_cast<int>(p.n_rot), theta_scale, p.freq_scale,
                p.freq_factors, p.neox, static_cast<int>(total), p.ext_factor, p.corr_lo, p.corr_hi,
                p.mscale);
}

}  // namespace

void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t token_stride, const int32_t* pos,
          const RopeParams& p, StreamHandle stream) {
  launch_rope({x, static_cast<int>(n_head), token_stride}, {nullptr, 0, 0}, n_tokens, pos, p,
              stream);
}

void rope_qk(float* q, int64_t n_head_q, float* k, int64_t n_head_k, int64_t n_tokens,
             const int32_t* pos, const RopeParams& p, StreamHandle stream) {
  launch_rope({q, static_cast<int>(n_head_q), n_head_q * p.head_dim},
              {k, static_cast<int>(n_head_k), n_head_k * p.head_dim}, n_tokens, pos, p, stream);
}

}  // namespace hypura::compute::cuda
