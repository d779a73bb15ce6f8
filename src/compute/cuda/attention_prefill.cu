// Prefill attention (attention.h): SIMT F32, one thread block per 16 query rows of one kv
// head, keys in shared-memory tiles of 32.
#include <cuda_fp16.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include "compute/cuda/attention.h"
#include "compute/cuda/common.cuh"

namespace hypura::compute::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 4;
constexpr int kRows = kWarps * kRowsPerWarp;  // query rows per block
constexpr int kTile = 32;                     // keys per tile (one per lane)

// The latent form (attention.h): values are the key rows' prefix, read from the key tile.
__host__ __device__ inline bool latent_form(const AttnPrefillArgs& a) {
  return a.v == a.k && a.v_stride == a.k_stride;
}

struct Smem {
  int q_stride, k_stride, v_stride;  // floats
  size_t bytes;
};
__host__ __device__ inline Smem smem_layout(int hd, int kd, bool latent) {
  Smem s;
  s.q_stride = hd;
  s.k_stride = hd + 4;  // lane j reads row j with 16-byte loads: no bank conflicts
  s.v_stride = latent ? s.k_stride : 32 * kd;
  // Latent: no value tile, but 32 kd floats past the last key row, which the lanes' value
  // reads past head_dim_v reach (those outputs are never stored).
  const int v_floats = latent ? 32 * kd : kTile * s.v_stride;
  s.bytes = static_cast<size_t>(kRows * s.q_stride + kTile * s.k_stride + v_floats) * 4;
  return s;
}

// Widens 32 cache rows of `width` halves starting at position kt0 into dst (row stride
// `stride` floats); rows past `last` are zeros.
__device__ __forceinline__ void load_tile(const uint16_t* src, int64_t src_stride, int64_t kt0,
                                          int64_t last, int width, float* dst, int stride) {
  const int per_row = width / 8;
  for (int idx = threadIdx.x; idx < kTile * per_row; idx += kThreads) {
    const int j = idx / per_row, c = idx % per_row;
    const int64_t p = kt0 + j;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (p <= last) raw = *reinterpret_cast<const uint4*>(src + p * src_stride + c * 8);
    const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
    float* o = dst + j * stride + c * 8;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r[k]));
      o[2 * k] = f.x;
      o[2 * k + 1] = f.y;
    }
  }
}

// kD: output dims per lane (head_dim, head_dim_v <= 32 kD).
template <int kD>
__global__ void __launch_bounds__(kThreads) attn_prefill_kernel(AttnPrefillArgs a) {
  extern __shared__ float smem[];
  grid_dep_wait();
  grid_dep_launch();
  const int hd = static_cast<int>(a.head_dim), hdv = static_cast<int>(a.head_dim_v);
  const bool latent = latent_form(a);
  const Smem lay = smem_layout(hd, kD, latent);
  float* s_q = smem;
  float* s_k = s_q + kRows * lay.q_stride;
  float* s_v = latent ? s_k : s_k + kTile * lay.k_stride;
  const int group = static_cast<int>(a.n_head / a.n_head_kv);
  const int kv = blockIdx.y;
  const int64_t n_rows = a.n_tokens * group;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t q_row_stride = a.n_head * a.head_dim;

  for (int idx = threadIdx.x; idx < kRows * hd; idx += kThreads) {
    const int r = idx / hd, d = idx % hd;
    const int64_t row = row0 + r;
    float val = 0.0f;
    if (row < n_rows) {
      const int64_t t = row / group, h = kv * group + row % group;
      val = a.q[t * q_row_stride + h * hd + d];
    }
    s_q[r * lay.q_stride + d] = val;
  }
  // This warp's rows: position and first visible key (p = -1: no such row).
  int64_t p[kRowsPerWarp], first[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int64_t row = row0 + warp * kRowsPerWarp + i;
    p[i] = row < n_rows ? a.pos0 + row / group : -1;
    first[i] = a.n_swa > 0 ? max(int64_t{0}, p[i] - a.n_swa + 1) : 0;
  }
  // The block's keys: from the first row's window start to the last row's position.
  const int64_t last_row = min(n_rows - 1, row0 + kRows - 1);
  const int64_t key_hi = a.pos0 + last_row / group;
  const int64_t key_lo = a.n_swa > 0 ? max(int64_t{0}, a.pos0 + row0 / group - a.n_swa + 1) : 0;

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kD];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kD; ++c) acc[i][c] = 0.0f;
  }
  const uint16_t* kbase = a.k + kv * a.head_dim;
  const uint16_t* vbase = a.v + kv * a.head_dim_v;
  for (int64_t kt0 = key_lo / kTile * kTile; kt0 <= key_hi; kt0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and s_q written, the first time)
    load_tile(kbase, a.k_stride, kt0, key_hi, hd, s_k, lay.k_stride);
    if (!latent) load_tile(vbase, a.v_stride, kt0, key_hi, hdv, s_v, lay.v_stride);
    __syncthreads();
    // Skip the tile when none of this warp's rows sees any of its keys (uniform per warp).
    bool any = false;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) any |= p[i] >= kt0 && first[i] < kt0 + kTile;
    if (!any) continue;
    float s[kRowsPerWarp] = {};
    const float* krow = s_k + lane * lay.k_stride;
    for (int d = 0; d < hd; d += 4) {
      const float4 k4 = *reinterpret_cast<const float4*>(krow + d);
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const float4 q4 =
            *reinterpret_cast<const float4*>(s_q + (warp * kRowsPerWarp + i) * lay.q_stride + d);
        s[i] += q4.x * k4.x;
        s[i] += q4.y * k4.y;
        s[i] += q4.z * k4.z;
        s[i] += q4.w * k4.w;
      }
    }
    const int64_t kp = kt0 + lane;
    float pr[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const bool visible = kp <= p[i] && kp >= first[i];
      const float si = visible ? s[i] * a.kq_scale : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(si));
      if (m_new == -INFINITY) {  // nothing visible yet
        pr[i] = 0.0f;
        continue;
      }
      const float corr = expf(m[i] - m_new);
      pr[i] = visible ? expf(si - m_new) : 0.0f;
      l[i] = l[i] * corr + warp_sum(pr[i]);
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < kD; ++c) acc[i][c] *= corr;
    }
    for (int j = 0; j < kTile; ++j) {
      const float* vrow = s_v + j * lay.v_stride + lane;
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const float pj = __shfl_sync(0xffffffffu, pr[i], j);
#pragma unroll
        for (int c = 0; c < kD; ++c) acc[i][c] += pj * vrow[32 * c];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int64_t row = row0 + warp * kRowsPerWarp + i;
    if (row >= n_rows) continue;
    const int64_t t = row / group, h = kv * group + row % group;
    float* o = a.out + t * a.n_head * hdv + h * hdv;
    float scale = 1.0f, li = l[i];
    if (a.sinks != nullptr && li > 0.0f) {  // the sink joins the softmax as a last logit
      const float s = a.sinks[h], mm = fmaxf(m[i], s);
      scale = expf(m[i] - mm);
      li = li * scale + expf(s - mm);
    }
    const float inv = li > 0.0f ? scale / li : 0.0f;
#pragma unroll
    for (int c = 0; c < kD; ++c) {
      const int d = lane + 32 * c;
      if (d < hdv) o[d] = acc[i][c] * inv;
    }
  }
}

template <int kD>
void launch_prefill(const AttnPrefillArgs& a, StreamHandle stream) {
  const Smem lay = smem_layout(static_cast<int>(a.head_dim), kD, latent_form(a));
  static bool configured = false;  // the opt-in for more than 48 KiB, once per process
  if (!configured) {
    const size_t most = std::max(smem_layout(static_cast<int>(kAttnMaxHeadDim), kD, false).bytes,
                                 smem_layout(static_cast<int>(kAttnMaxLatentDim), kD, true).bytes);
    cudaFuncSetAttribute(attn_prefill_kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(most));
    configured = true;
  }
  const int64_t n_rows = a.n_tokens * (a.n_head / a.n_head_kv);
  const dim3 grid(static_cast<unsigned>((n_rows + kRows - 1) / kRows),
                  static_cast<unsigned>(a.n_head_kv));
  launch_kernel(attn_prefill_kernel<kD>, grid, kThreads, lay.bytes, stream, a);
}

// Keys then values: one thread per element of either.
__global__ void store_kv_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                int64_t nk, int64_t n, int k_width, int v_width,
                                const int32_t* __restrict__ pos, __half* __restrict__ k_cache,
                                __half* __restrict__ v_cache) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const bool is_v = i >= nk;
  const int64_t j = is_v ? i - nk : i;
  const int width = is_v ? v_width : k_width;
  const int64_t t = j / width;
  (is_v ? v_cache : k_cache)[static_cast<int64_t>(pos[t]) * width + j % width] =
      __float2half_rn((is_v ? v : k)[j]);
}

// One row per sequence, each into its own caches: the row is the sequence.
__global__ void store_kv_seqs_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                     int k_width, int v_width, const int32_t* __restrict__ pos,
                                     const __grid_constant__ AttnSeqs seqs) {
  grid_dep_wait();
  grid_dep_launch();
  const int t = blockIdx.y, width = k_width + v_width;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= width) return;
  const bool is_v = i >= k_width;
  const int j = is_v ? i - k_width : i;
  const int w = is_v ? v_width : k_width;
  auto* cache = reinterpret_cast<__half*>(is_v ? seqs.v[t] : seqs.k[t]);
  cache[static_cast<int64_t>(pos[t]) * w + j] =
      __float2half_rn((is_v ? v : k)[static_cast<int64_t>(t) * w + j]);
}

}  // namespace

void attention_prefill(const AttnPrefillArgs& a, StreamHandle stream) {
  const bool latent = latent_form(a);
  // The output dims per lane cover the values (and, with rows of their own, the keys).
  const int64_t widest = latent ? a.head_dim_v : std::max(a.head_dim, a.head_dim_v);
  assert(a.head_dim % 8 == 0 && a.head_dim_v % 8 == 0);
  assert(latent ? a.head_dim <= kAttnMaxLatentDim && a.head_dim_v <= kAttnMaxLatentDimV
                : widest <= kAttnMaxHeadDim);
  if (a.n_tokens == 0) return;
  if (widest <= 64) {
    launch_prefill<2>(a, stream);
  } else if (widest <= 128) {
    launch_prefill<4>(a, stream);
  } else if (widest <= 256) {
    launch_prefill<8>(a, stream);
  } else {
    launch_prefill<16>(a, stream);
  }
}

void store_kv_f16(const float* k, const float* v, int64_t n_tokens, int64_t k_width,
                  int64_t v_width, const int32_t* pos, uint16_t* k_cache, uint16_t* v_cache,
                  StreamHandle stream) {
  const int64_t nk = n_tokens * k_width, n = nk + n_tokens * v_width;
  if (n == 0) return;
  launch_kernel(store_kv_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, k, v, nk,
                n, static_cast<int>(k_width), static_cast<int>(v_width), pos,
                reinterpret_cast<__half*>(k_cache), reinterpret_cast<__half*>(v_cache));
}

void store_kv_f16_seqs(const float* k, const float* v, int64_t k_width, int64_t v_width,
                       const int32_t* pos, const AttnSeqs& seqs, StreamHandle stream) {
  const int64_t width = k_width + v_width;
  const dim3 grid(static_cast<unsigned>((width + 255) / 256), static_cast<unsigned>(seqs.n));
  launch_kernel(store_kv_seqs_kernel, grid, 256, 0, stream, k, v, static_cast<int>(k_width),
                static_cast<int>(v_width), pos, seqs);
}

}  // namespace hypura::compute::cuda
