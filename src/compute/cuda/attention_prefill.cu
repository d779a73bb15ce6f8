// Prefill attention (attention.h): on the tensor cores where the head dims allow (keys a
// multiple of 16, values of 32), else SIMT F32; either takes 16 query rows of one kv head a
// block and keys in shared-memory tiles of 32.
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

// ---- Tensor-core prefill: a block of 16 query rows, four warps ----
//
// The scores of a 32-key tile: warp w takes keys 8 w .. 8 w + 7 against all 16 rows (m16n8k16
// over the head dims), the tile's scores meet in shared memory, and every warp runs the same
// online softmax on them (so all four hold the same row maxima and sums) and multiplies the
// probabilities by its quarter of the value dims. The queries and the probabilities enter
// the tensor cores as two F16 terms each (x = hi + lo, |lo| <= 2^-11 |x|), the keys and
// values as the cache's F16, so the products keep about 22 bits: F32 rounding, as the SIMT
// kernel's. kNT: value dims per warp / 8.
constexpr int kMmaRows = 16;
constexpr int kMmaKeys = 32;
constexpr int kMmaThreads = 128;
constexpr int kScoreStride = kMmaKeys + 4;  // floats a row of the score tile

struct MmaSmem {
  int q_stride, k_stride, v_stride;  // halves
  size_t q_lo, k, v, s, bytes;       // byte offsets of the parts, and the total
};
__host__ __device__ inline MmaSmem mma_smem(int hd, int hdv, bool latent) {
  MmaSmem m;
  m.q_stride = m.k_stride = hd + 8;  // 8 rows of 4 lanes' 4-byte loads hit 32 banks
  m.v_stride = hdv + 8;
  m.q_lo = static_cast<size_t>(kMmaRows) * m.q_stride * 2;
  m.k = 2 * m.q_lo;
  m.v = m.k + static_cast<size_t>(kMmaKeys) * m.k_stride * 2;
  m.s = m.v + (latent ? 0 : static_cast<size_t>(kMmaKeys) * m.v_stride * 2);
  m.bytes = m.s + static_cast<size_t>(kMmaRows) * kScoreStride * 4;
  return m;
}

// 32 cache rows of `width` halves from position kt0 into dst (row stride `stride` halves);
// rows past `last` are zeros (an unwritten cache row may hold NaNs, and 0 * NaN is NaN).
__device__ __forceinline__ void load_tile_f16(const uint16_t* src, int64_t src_stride, int64_t kt0,
                                              int64_t last, int width, uint16_t* dst, int stride) {
  const int per_row = width / 8;
  for (int idx = threadIdx.x; idx < kMmaKeys * per_row; idx += kMmaThreads) {
    const int j = idx / per_row, c = idx % per_row;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (kt0 + j <= last)
      raw = *reinterpret_cast<const uint4*>(src + (kt0 + j) * src_stride + c * 8);
    *reinterpret_cast<uint4*>(dst + j * stride + c * 8) = raw;
  }
}

__device__ __forceinline__ uint32_t lds32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The B fragment (keys k0 .. k0 + 15 by 8 value dims) of row-major values, transposed on load.
__device__ __forceinline__ void ldmatrix_x2_trans(const uint16_t* row, uint32_t& b0, uint32_t& b1) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(b0), "=r"(b1)
               : "r"(addr));
}

template <int kNT>
__global__ void __launch_bounds__(kMmaThreads) attn_prefill_mma_kernel(AttnPrefillArgs a) {
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  grid_dep_wait();
  grid_dep_launch();
  const int hd = static_cast<int>(a.head_dim), hdv = static_cast<int>(a.head_dim_v);
  const bool latent = latent_form(a);
  const MmaSmem lay = mma_smem(hd, hdv, latent);
  auto* s_qhi = reinterpret_cast<uint16_t*>(smem_bytes);
  auto* s_qlo = reinterpret_cast<uint16_t*>(smem_bytes + lay.q_lo);
  auto* s_k = reinterpret_cast<uint16_t*>(smem_bytes + lay.k);
  uint16_t* s_v = latent ? s_k : reinterpret_cast<uint16_t*>(smem_bytes + lay.v);
  const int v_stride = latent ? lay.k_stride : lay.v_stride;
  auto* s_s = reinterpret_cast<float*>(smem_bytes + lay.s);
  const int group = static_cast<int>(a.n_head / a.n_head_kv);
  const int kv = blockIdx.y;
  const int64_t n_rows = a.n_tokens * group;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
  const int64_t q_row_stride = a.n_head * a.head_dim;

  for (int idx = threadIdx.x; idx < kMmaRows * hd; idx += kMmaThreads) {
    const int r = idx / hd, d = idx % hd;
    const int64_t row = row0 + r;
    float x = 0.0f;
    if (row < n_rows) x = a.q[row / group * q_row_stride + (kv * group + row % group) * hd + d];
    const __half hi = __float2half_rn(x);
    s_qhi[r * lay.q_stride + d] = __half_as_ushort(hi);
    s_qlo[r * lay.q_stride + d] = __half_as_ushort(__float2half_rn(x - __half2float(hi)));
  }
  // This lane's rows gid and gid + 8: position and first visible key (p = -1: no such row).
  int64_t p[2], first[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = row0 + gid + 8 * i;
    p[i] = row < n_rows ? a.pos0 + row / group : -1;
    first[i] = a.n_swa > 0 ? max(int64_t{0}, p[i] - a.n_swa + 1) : 0;
  }
  const int64_t last_row = min(n_rows - 1, row0 + kMmaRows - 1);
  const int64_t key_hi = a.pos0 + last_row / group;
  const int64_t key_lo = a.n_swa > 0 ? max(int64_t{0}, a.pos0 + row0 / group - a.n_swa + 1) : 0;

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float acc[kNT][4] = {};
  const int d0 = warp * kNT * 8;  // this warp's value dims
  const uint16_t* kbase = a.k + kv * a.head_dim;
  const uint16_t* vbase = a.v + kv * a.head_dim_v;
  for (int64_t kt0 = key_lo / kMmaKeys * kMmaKeys; kt0 <= key_hi; kt0 += kMmaKeys) {
    __syncthreads();  // the previous tile is consumed (and the queries written, the first time)
    load_tile_f16(kbase, a.k_stride, kt0, key_hi, hd, s_k, lay.k_stride);
    if (!latent) load_tile_f16(vbase, a.v_stride, kt0, key_hi, hdv, s_v, lay.v_stride);
    __syncthreads();
    float s[4] = {};
    const uint16_t* krow = s_k + (warp * 8 + gid) * lay.k_stride + tig * 2;
    for (int k0 = 0; k0 < hd; k0 += 16) {
      const uint16_t* qh = s_qhi + gid * lay.q_stride + k0 + tig * 2;
      const uint16_t* ql = s_qlo + gid * lay.q_stride + k0 + tig * 2;
      const int q8 = 8 * lay.q_stride;
      const uint32_t ahi[4] = {lds32(qh), lds32(qh + q8), lds32(qh + 8), lds32(qh + q8 + 8)};
      const uint32_t alo[4] = {lds32(ql), lds32(ql + q8), lds32(ql + 8), lds32(ql + q8 + 8)};
      const uint32_t b0 = lds32(krow + k0), b1 = lds32(krow + k0 + 8);
      mma_16816(s, ahi, b0, b1);
      mma_16816(s, alo, b0, b1);
    }
    float* srow = s_s + gid * kScoreStride + warp * 8 + tig * 2;
    srow[0] = s[0];
    srow[1] = s[1];
    srow[8 * kScoreStride] = s[2];
    srow[8 * kScoreStride + 1] = s[3];
    __syncthreads();
    // Row i's keys of this lane: 16 ks + 8 h + 2 tig + e (k-step ks, half h, e = 0, 1), the
    // A fragment's columns.
    uint32_t phi[2][4], plo[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float v[8];
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int c = 8 * (j / 2) + 2 * tig + j % 2;
        const int64_t kp = kt0 + c;
        const bool visible = kp <= p[i] && kp >= first[i];
        v[j] = visible ? s_s[(gid + 8 * i) * kScoreStride + c] * a.kq_scale : -INFINITY;
        tile_max = fmaxf(tile_max, v[j]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float m_new = fmaxf(m[i], tile_max);
      float corr = 1.0f, sum = 0.0f;
      if (m_new != -INFINITY) {  // else nothing visible yet: p = 0, no rescale
        corr = expf(m[i] - m_new);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          v[j] = v[j] == -INFINITY ? 0.0f : expf(v[j] - m_new);
          sum += v[j];
        }
        m[i] = m_new;
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = 0.0f;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      l[i] = l[i] * corr + sum;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        acc[nt][2 * i] *= corr;
        acc[nt][2 * i + 1] *= corr;
      }
      // v[2 q], v[2 q + 1] are columns 8 q + 2 tig, + 1: k-step q / 2, register half q % 2.
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const __half h0 = __float2half_rn(v[2 * q]), h1 = __float2half_rn(v[2 * q + 1]);
        const float r0 = v[2 * q] - __half2float(h0), r1 = v[2 * q + 1] - __half2float(h1);
        // Fragment register: row half i (a[0]/a[2] row gid, a[1]/a[3] row gid + 8), column
        // half q % 2 (a[0], a[1] columns 0-7; a[2], a[3] columns 8-15).
        const int reg = i + 2 * (q % 2);
        phi[q / 2][reg] = pack_half2(__half2float(h0), __half2float(h1));
        plo[q / 2][reg] = pack_half2(r0, r1);
      }
    }
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        uint32_t b0, b1;
        ldmatrix_x2_trans(s_v + (ks * 16 + lane % 16) * v_stride + d0 + nt * 8, b0, b1);
        mma_16816(acc[nt], phi[ks], b0, b1);
        mma_16816(acc[nt], plo[ks], b0, b1);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = row0 + gid + 8 * i;
    if (row >= n_rows) continue;
    const int64_t t = row / group, h = kv * group + row % group;
    float* o = a.out + t * a.n_head * hdv + h * hdv + d0 + tig * 2;
    float scale = 1.0f, li = l[i];
    if (a.sinks != nullptr && li > 0.0f) {  // the sink joins the softmax as a last logit
      const float sk = a.sinks[h], mm = fmaxf(m[i], sk);
      scale = expf(m[i] - mm);
      li = li * scale + expf(sk - mm);
    }
    const float inv = li > 0.0f ? scale / li : 0.0f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      o[nt * 8] = acc[nt][2 * i] * inv;
      o[nt * 8 + 1] = acc[nt][2 * i + 1] * inv;
    }
  }
}

template <int kNT>
void launch_prefill_mma(const AttnPrefillArgs& a, StreamHandle stream) {
  const MmaSmem lay =
      mma_smem(static_cast<int>(a.head_dim), static_cast<int>(a.head_dim_v), latent_form(a));
  static bool configured = false;  // the opt-in for more than 48 KiB, once per process
  if (!configured) {
    const size_t most = std::max(
        mma_smem(static_cast<int>(kAttnMaxHeadDim), static_cast<int>(kAttnMaxHeadDim), false).bytes,
        mma_smem(static_cast<int>(kAttnMaxLatentDim), static_cast<int>(kAttnMaxLatentDimV), true)
            .bytes);
    cudaFuncSetAttribute(attn_prefill_mma_kernel<kNT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(most));
    configured = true;
  }
  const int64_t n_rows = a.n_tokens * (a.n_head / a.n_head_kv);
  const dim3 grid(static_cast<unsigned>((n_rows + kMmaRows - 1) / kMmaRows),
                  static_cast<unsigned>(a.n_head_kv));
  launch_kernel(attn_prefill_mma_kernel<kNT>, grid, kMmaThreads, lay.bytes, stream, a);
}

// The tensor-core kernel where the dims split into its tiles (keys: k-steps of 16; values:
// four warps of 8-dim tiles); true if it ran.
bool try_prefill_mma(const AttnPrefillArgs& a, StreamHandle stream) {
  if (a.head_dim % 16 != 0 || a.head_dim_v % 32 != 0) return false;
  switch (a.head_dim_v / 32) {
    case 2:
      launch_prefill_mma<2>(a, stream);
      return true;
    case 3:
      launch_prefill_mma<3>(a, stream);
      return true;
    case 4:
      launch_prefill_mma<4>(a, stream);
      return true;
    case 8:
      launch_prefill_mma<8>(a, stream);
      return true;
    case 16:
      launch_prefill_mma<16>(a, stream);
      return true;
    default:
      return false;
  }
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
  if (a.n_tokens == 0 || try_prefill_mma(a, stream)) return;
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
