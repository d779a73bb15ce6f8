#include <cmath>

#include "compute/cuda/attention.h"
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

// The rotation's constants: RopeParams with theta_scale computed on the host.
struct RopeArgs {
  int head_dim, n_rot;
  float theta_scale, freq_scale;
  const float* freq_factors;
  bool neox;
  float ext_factor, corr_lo, corr_hi, mscale;
};

RopeArgs rope_args(const RopeParams& p) {
  // On the host with std::pow, as the CPU computes it, so theta_scale is the same float.
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  return {static_cast<int>(p.head_dim),
          static_cast<int>(p.n_rot),
          theta_scale,
          p.freq_scale,
          p.freq_factors,
          p.neox,
          p.ext_factor,
          p.corr_lo,
          p.corr_hi,
          p.mscale};
}

// Rotates pair i of the head at h for position pos in place; *a, *b: the pair's dims.
__device__ __forceinline__ void rotate_pair(float* h, int i, int32_t pos, const RopeArgs& r, int* a,
                                            int* b) {
  float theta_base = static_cast<float>(pos);
  for (int k = 0; k < i; ++k) theta_base *= r.theta_scale;  // the CPU's sequence of roundings
  const float ff = r.freq_factors ? r.freq_factors[i] : 1.0f;
  const float theta_extrap = theta_base / ff;
  float theta = r.freq_scale * theta_extrap;
  if (r.ext_factor != 0.0f) {
    const float x = (static_cast<float>(i) - r.corr_lo) / fmaxf(0.001f, r.corr_hi - r.corr_lo);
    const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, x))) * r.ext_factor;
    theta = theta * (1.0f - mix) + theta_extrap * mix;
  }
  float s, c;
  sincosf(theta, &s, &c);
  c *= r.mscale;
  s *= r.mscale;
  const int half = r.n_rot / 2;
  *a = r.neox ? i : 2 * i;
  *b = r.neox ? i + half : 2 * i + 1;
  const float x0 = h[*a], x1 = h[*b];
  h[*a] = x0 * c - x1 * s;
  h[*b] = x0 * s + x1 * c;
}

// One thread per (target, token, head, rotated pair): the first target's pairs, then the
// second's (n_first of them).
__global__ void rope_kernel(RopeTarget t0, RopeTarget t1, int n_first, const int32_t* pos,
                            RopeArgs r, int n_pairs_total) {
  grid_dep_wait();
  grid_dep_launch();
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n_pairs_total) return;
  const bool second = idx >= n_first;
  if (second) idx -= n_first;
  const RopeTarget& tg = second ? t1 : t0;
  const int half = r.n_rot / 2;
  const int i = idx % half;
  const int head = (idx / half) % tg.n_head;
  const int t = idx / half / tg.n_head;
  int a, b;
  rotate_pair(tg.x + t * tg.token_stride + static_cast<int64_t>(head) * r.head_dim, i, pos[t], r,
              &a, &b);
}

void launch_rope(RopeTarget t0, RopeTarget t1, int64_t n_tokens, const int32_t* pos,
                 const RopeParams& p, StreamHandle stream) {
  const int64_t first = n_tokens * t0.n_head * (p.n_rot / 2);
  const int64_t total = first + n_tokens * t1.n_head * (p.n_rot / 2);
  if (total == 0) return;
  const unsigned grid = static_cast<unsigned>((total + 255) / 256);
  launch_kernel(rope_kernel, grid, 256, 0, stream, t0, t1, static_cast<int>(first), pos,
                rope_args(p), static_cast<int>(total));
}

// Row t (blockIdx.y) of a decode step, sequence t's: its q pairs rotated; its k pairs
// rotated and stored with the rest of its keys and its values at pos[t] of the sequence's
// caches, rounded to nearest even as store_kv_f16_seqs rounds them.
__global__ void rope_store_seqs_kernel(float* __restrict__ q, int n_head_q, float* __restrict__ k,
                                       int n_head_k, const float* __restrict__ v, int v_width,
                                       const int32_t* __restrict__ pos, RopeArgs r,
                                       const __grid_constant__ AttnSeqs seqs) {
  grid_dep_wait();
  grid_dep_launch();
  const int t = blockIdx.y, half = r.n_rot / 2, rest = r.head_dim - r.n_rot;
  const int k_width = n_head_k * r.head_dim;
  const int nq = n_head_q * half, nk = n_head_k * half, nr = n_head_k * rest;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int32_t p = pos[t];
  int a, b;
  if (i < nq) {
    rotate_pair(q + static_cast<int64_t>(t) * n_head_q * r.head_dim + (i / half) * r.head_dim,
                i % half, p, r, &a, &b);
    return;
  }
  i -= nq;
  __half* kc = reinterpret_cast<__half*>(seqs.k[t]) + static_cast<int64_t>(p) * k_width;
  float* kr = k + static_cast<int64_t>(t) * k_width;
  if (i < nk) {
    const int head = i / half;
    rotate_pair(kr + head * r.head_dim, i % half, p, r, &a, &b);
    kc[head * r.head_dim + a] = __float2half_rn(kr[head * r.head_dim + a]);
    kc[head * r.head_dim + b] = __float2half_rn(kr[head * r.head_dim + b]);
    return;
  }
  i -= nk;
  if (i < nr) {  // the dims past n_rot pass through
    const int j = (i / rest) * r.head_dim + r.n_rot + i % rest;
    kc[j] = __float2half_rn(kr[j]);
    return;
  }
  i -= nr;
  if (i < v_width) {
    reinterpret_cast<__half*>(seqs.v[t])[static_cast<int64_t>(p) * v_width + i] =
        __float2half_rn(v[static_cast<int64_t>(t) * v_width + i]);
  }
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

void rope_qk_store_seqs(float* q, int64_t n_head_q, float* k, int64_t n_head_k, const float* v,
                        int64_t v_width, const int32_t* pos, const RopeParams& p,
                        const AttnSeqs& seqs, StreamHandle stream) {
  const int64_t per_row =
      (n_head_q + n_head_k) * (p.n_rot / 2) + n_head_k * (p.head_dim - p.n_rot) + v_width;
  const dim3 grid(static_cast<unsigned>((per_row + 255) / 256), static_cast<unsigned>(seqs.n));
  launch_kernel(rope_store_seqs_kernel, grid, 256, 0, stream, q, static_cast<int>(n_head_q), k,
                static_cast<int>(n_head_k), v, static_cast<int>(v_width), pos, rope_args(p), seqs);
}

}  // namespace hypura::compute::cuda
