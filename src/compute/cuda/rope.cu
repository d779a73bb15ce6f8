#include <cmath>

#include "compute/cuda/common.cuh"
#include "compute/cuda/rope.h"

namespace hypura::compute::cuda {
namespace {

// One thread per (token, head, rotated pair).
__global__ void rope_kernel(float* x, int n_head, int64_t token_stride, const int32_t* pos,
                            int head_dim, int n_rot, float theta_scale, float freq_scale,
                            const float* freq_factors, bool neox, int n_pairs_total) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n_pairs_total) return;
  const int half = n_rot / 2;
  const int i = idx % half;
  const int head = (idx / half) % n_head;
  const int t = idx / half / n_head;
  float theta_base = static_cast<float>(pos[t]);
  for (int k = 0; k < i; ++k) theta_base *= theta_scale;  // the CPU's sequence of roundings
  const float ff = freq_factors ? freq_factors[i] : 1.0f;
  const float theta = freq_scale * (theta_base / ff);
  float s, c;
  sincosf(theta, &s, &c);
  float* h = x + t * token_stride + static_cast<int64_t>(head) * head_dim;
  const int a = neox ? i : 2 * i;
  const int b = neox ? i + half : 2 * i + 1;
  const float x0 = h[a], x1 = h[b];
  h[a] = x0 * c - x1 * s;
  h[b] = x0 * s + x1 * c;
}

}  // namespace

void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t token_stride, const int32_t* pos,
          const RopeParams& p, StreamHandle stream) {
  const int64_t total = n_tokens * n_head * (p.n_rot / 2);
  if (total == 0) return;
  // On the host with std::pow, as the CPU computes it, so theta_scale is the same float.
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  const unsigned grid = static_cast<unsigned>((total + 255) / 256);
  rope_kernel<<<grid, 256, 0, stream>>>(x, static_cast<int>(n_head), token_stride, pos,
                                        static_cast<int>(p.head_dim), static_cast<int>(p.n_rot),
                                        theta_scale, p.freq_scale, p.freq_factors, p.neox,
                                        static_cast<int>(total));
}

}  // namespace hypura::compute::cuda
