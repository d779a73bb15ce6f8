#include <cassert>

#include "compute/cuda/attention.h"
#include "compute/cuda/common.cuh"

namespace hypura::compute::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxG = 8;       // q heads per thread block (a GQA group, or 8 of it)
constexpr int kMaxSeg = 1024;  // segments the merge kernel keeps in shared memory
constexpr int kSeg = static_cast<int>(kAttnSegment);
constexpr int kUnroll = 4;        // key rows loaded before the first is used
constexpr int kFillBlocks = 264;  // about two thread blocks per multiprocessor of an H100/H200
constexpr int kKeepSeg = 32;      // shortest segment before q heads are split over blocks
constexpr int kMinSeg = 8;        // shortest segment

__device__ __forceinline__ int pow2_at_least(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

__device__ __forceinline__ void widen8(const uint4& raw, float (&out)[8]) {
  const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r[k]));
    out[2 * k] = f.x;
    out[2 * k + 1] = f.y;
  }
}

// One (segment, kv head, chunk of up to kG q heads, sequence): partials m, l,
// acc[head_dim_v]. kG is 2, 4 or 8 (kMaxG): registers hold kG x 8 query values and
// accumulators. With kSeqs, blockIdx.z is sequence * chunks + chunk and a sequence's
// partials are seq_partial floats after the previous one's; without, the launch has one
// sequence and keeps the registers of a kernel without a sequence index. The caches are
// read from the grid-constant parameter in place (a copy indexed by the sequence would go
// to the stack). kBranch: a draft tree's row, whose keys past a.branch_base are read from
// its branch's slots (the same keys in the same order as its branch decoded alone).
template <int kG, bool kSeqs, bool kBranch = false>
__global__ void __launch_bounds__(kThreads)
    attn_segment(AttnDecodeArgs a, const __grid_constant__ AttnSeqs seqs,
                 float* __restrict__ partial, int n_seg, int seg_len, int chunks,
                 int64_t seq_partial) {
  __shared__ float s_p[kG][kSeg];            // scores, then exp(s - m)
  __shared__ float s_ml[kG][2];              // m, l per q head
  __shared__ float s_red[kThreads * kG][8];  // V partials of every key slot
  grid_dep_wait();
  grid_dep_launch();
  const int seg = blockIdx.x, kv_head = blockIdx.y;
  const int seq = kSeqs ? static_cast<int>(blockIdx.z) / chunks : 0;
  const uint16_t* kc = seqs.k[seq];
  const uint16_t* vc = seqs.v[seq];
  const float* q = a.q + seq * seqs.q_stride;
  const int32_t* pos = a.pos != nullptr ? a.pos + seq : nullptr;
  partial += seq * seq_partial;
  const int group = static_cast<int>(a.n_head / a.n_head_kv);
  const int chunk = kSeqs ? static_cast<int>(blockIdx.z) % chunks : static_cast<int>(blockIdx.z);
  const int g0 = chunk * kG, ng = min(kG, group - g0);
  const int head0 = kv_head * group + g0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int hd = static_cast<int>(a.head_dim), hdv = static_cast<int>(a.head_dim_v);
  int64_t kv_first = a.kv_first, kv_end = a.kv_end;
  if (pos != nullptr) {  // the replayable form: the position from the device
    kv_end = static_cast<int64_t>(*pos) + 1;
    kv_first = a.n_swa > 0 ? max(int64_t{0}, kv_end - a.n_swa) : 0;
  }
  const int64_t first = kv_first + static_cast<int64_t>(seg) * seg_len;
  // Segments past the end (replayable form) have no keys: m = -inf, l = 0, acc = 0.
  const int n_keys =
      static_cast<int>(max(int64_t{0}, min(kv_end - first, static_cast<int64_t>(seg_len))));
  // Rows between key j's slot and the segment's first position.
  const auto row = [&](int j) -> int64_t {
    if constexpr (kBranch) {
      const int64_t p = first + j;
      return (p < a.branch_base ? p : a.branch[p - a.branch_base]) - first;
    }
    return j;
  };

  // Scores. A key row is read by lpk lanes, 8 dims each; a warp step covers 32 / lpk keys.
  // Keys wider than 256 dims (MLA's 576) take several passes of 256, each adding its dots.
  {
    const int lpk = min(32, pow2_at_least(hd / 8)), kps = 32 / lpk;
    const int sub = lane % lpk;
    for (int c0 = 0; c0 < hd; c0 += lpk * 8) {
      const int d0 = c0 + sub * 8;
      const bool active = d0 < hd, first_pass = c0 == 0, last_pass = c0 + lpk * 8 >= hd;
      float qr[kG][8];
#pragma unroll
      for (int g = 0; g < kG; ++g) {
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          qr[g][t] = (g < ng && active) ? q[(head0 + g) * a.head_dim + d0 + t] : 0.0f;
        }
      }
      const uint16_t* kbase = kc + first * a.k_stride + kv_head * a.head_dim + d0;
      for (int j0 = warp * kps + lane / lpk; j0 - lane / lpk < n_keys;
           j0 += kWarps * kps * kUnroll) {
        uint4 raw[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int j = j0 + u * kWarps * kps;
          raw[u] = (active && j < n_keys)
                       ? *reinterpret_cast<const uint4*>(kbase + row(j) * a.k_stride)
                       : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int j = j0 + u * kWarps * kps;
          float kf[8];
          widen8(raw[u], kf);
#pragma unroll
          for (int g = 0; g < kG; ++g) {
            if (g >= ng) break;  // uniform over the block
            float dot = 0.0f;
#pragma unroll
            for (int t = 0; t < 8; ++t) dot += qr[g][t] * kf[t];
            for (int o = lpk / 2; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
            if (sub == 0 && j < n_keys) {  // the same thread owns key j in every pass
              const float sum = first_pass ? dot : s_p[g][j] + dot;
              s_p[g][j] = last_pass ? sum * a.kq_scale : sum;
            }
          }
        }
      }
    }
  }
  __syncthreads();

  // Softmax statistics: warp w takes q heads w, w + kWarps, ...
  for (int g = warp; g < ng; g += kWarps) {
    float m = -INFINITY;
    for (int j = lane; j < n_keys; j += 32) m = fmaxf(m, s_p[g][j]);
    m = warp_max(m);
    float l = 0.0f;
    for (int j = lane; j < n_keys; j += 32) {
      const float p = expf(s_p[g][j] - m);
      s_p[g][j] = p;
      l += p;
    }
    l = warp_sum(l);
    if (lane == 0) {
      s_ml[g][0] = m;
      s_ml[g][1] = l;
    }
  }
  __syncthreads();

  // Weighted sum of V: vpk threads per row, 8 dims each; slots of keys side by side.
  const int vpk = pow2_at_least(hdv / 8), slots = kThreads / vpk;
  const int sub = threadIdx.x % vpk, slot = threadIdx.x / vpk, d0 = sub * 8;
  const bool active = d0 < hdv;
  float acc[kG][8] = {};
  const uint16_t* vbase = vc + first * a.v_stride + kv_head * a.head_dim_v + d0;
  for (int j0 = slot; j0 < n_keys; j0 += slots * kUnroll) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * slots;
      raw[u] = (active && j < n_keys) ? *reinterpret_cast<const uint4*>(vbase + row(j) * a.v_stride)
                                      : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * slots;
      if (j >= n_keys) break;
      float vf[8];
      widen8(raw[u], vf);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        if (g >= ng) break;
        const float p = s_p[g][j];
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[g][t] += p * vf[t];
      }
    }
  }
  // Sum the slots in slot order (deterministic), then write the partials.
#pragma unroll
  for (int g = 0; g < kG; ++g) {
#pragma unroll
    for (int t = 0; t < 8; ++t) s_red[(slot * kG + g) * vpk + sub][t] = acc[g][t];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < ng * hdv; idx += kThreads) {
    const int g = idx / hdv, d = idx % hdv;
    float sum = 0.0f;
    for (int s = 0; s < slots; ++s) sum += s_red[(s * kG + g) * vpk + d / 8][d % 8];
    float* out = partial + (static_cast<size_t>(head0 + g) * n_seg + seg) * (hdv + 2);
    out[2 + d] = sum;
    if (d == 0) {
      out[0] = s_ml[g][0];
      out[1] = s_ml[g][1];
    }
  }
}

// out[head] = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s (plus e^(sink - M) with a
// sink, M then covering it too). The segments' weights go to shared memory first (threads
// over segments), so no thread walks the partials serially for its statistics; then a
// thread per dimension sums the weighted accumulators. blockIdx.x is sequence * n_head +
// head.
__global__ void __launch_bounds__(kThreads)
    attn_merge(const float* __restrict__ partial, int n_seg, int hdv, int n_head,
               const float* sinks, float* __restrict__ out, int64_t out_stride) {
  __shared__ float s_w[kMaxSeg];
  __shared__ float s_red[kWarps];
  grid_dep_wait();
  grid_dep_launch();
  const int head = blockIdx.x % n_head, seq = blockIdx.x / n_head;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int stride = hdv + 2;
  const float* ph = partial + static_cast<size_t>(blockIdx.x) * n_seg * stride;
  out += seq * out_stride;
  float big = -INFINITY;
  for (int s = threadIdx.x; s < n_seg; s += kThreads) big = fmaxf(big, ph[s * stride]);
  big = warp_max(big);
  if (lane == 0) s_red[warp] = big;
  __syncthreads();
  big = fmaxf(fmaxf(s_red[0], s_red[1]), fmaxf(s_red[2], s_red[3]));
  if (sinks != nullptr) big = fmaxf(big, sinks[head]);
  __syncthreads();
  float l = 0.0f;
  for (int s = threadIdx.x; s < n_seg; s += kThreads) {
    const float w = expf(ph[s * stride] - big);
    s_w[s] = w;
    l += w * ph[s * stride + 1];
  }
  l = warp_sum(l);
  if (lane == 0) s_red[warp] = l;
  __syncthreads();
  const float sink = sinks != nullptr ? expf(sinks[head] - big) : 0.0f;
  const float inv = 1.0f / ((((s_red[0] + s_red[1]) + s_red[2]) + s_red[3]) + sink);
  for (int d = threadIdx.x; d < hdv; d += kThreads) {
    float acc = 0.0f;
#pragma unroll 8
    for (int s = 0; s < n_seg; ++s) acc += s_w[s] * ph[s * stride + 2 + d];
    out[static_cast<size_t>(head) * hdv + d] = acc * inv;
  }
}

// A launch's shape: q heads per block (kMaxG, 4 or 2) and keys per segment.
struct Shape {
  int heads = kMaxG;
  int64_t seg = kSeg;
};

int64_t blocks_of(const Shape& sh, int64_t n_kv, int64_t group, int64_t n_head_kv) {
  return (n_kv + sh.seg - 1) / sh.seg * n_head_kv * ((group + sh.heads - 1) / sh.heads);
}

// Fewer blocks than kFillBlocks leave the GPU idle, so the shape is cut down in three
// steps, each while the blocks stay too few: segments down to kKeepSeg keys (blocks sharing
// every q head of a group, so long contexts read K and V once), then q heads per block down
// to 2 (short contexts: their keys are few, a block's serial work is what costs), then
// segments down to kMinSeg.
Shape launch_shape(int64_t n_kv, int64_t n_head, int64_t n_head_kv) {
  const int64_t group = n_head / n_head_kv;
  Shape sh;
  sh.heads = group <= 2 ? 2 : group <= 4 ? 4 : kMaxG;
  const auto few = [&] { return blocks_of(sh, n_kv, group, n_head_kv) < kFillBlocks; };
  while (sh.seg > kKeepSeg && few()) sh.seg /= 2;
  while (sh.heads > 2 && few()) sh.heads /= 2;
  while (sh.seg > kMinSeg && few()) sh.seg /= 2;
  return sh;
}

}  // namespace

size_t attention_scratch_bytes(int64_t n_head, int64_t n_head_kv, int64_t head_dim_v,
                               int64_t n_kv) {
  // Shorter segments only happen while segments x blocks < kFillBlocks, so their count stays
  // under 2 * kFillBlocks / blocks + 2 (one halving past the threshold, rounding up); a
  // segment has the fewest blocks with kMaxG heads each.
  const int64_t per_seg = n_head_kv * ((n_head / n_head_kv + kMaxG - 1) / kMaxG);
  const int64_t n_seg = (n_kv + kSeg - 1) / kSeg + 2 * ((kFillBlocks + per_seg - 1) / per_seg) + 2;
  return static_cast<size_t>(n_head * n_seg * (head_dim_v + 2)) * sizeof(float);
}

void attention_decode_seqs(const AttnDecodeArgs& a, const AttnSeqs& seqs, void* scratch,
                           StreamHandle stream) {
  assert(seqs.n >= 1 && seqs.n <= kAttnMaxSeqs && (seqs.n == 1 || a.pos != nullptr));
  assert(seqs.n == 1 || a.branch == nullptr);
  const int64_t n_kv = a.pos != nullptr ? a.max_kv : a.kv_end - a.kv_first;
  const Shape sh = launch_shape(n_kv, a.n_head, a.n_head_kv);
  const int64_t chunks = (a.n_head / a.n_head_kv + sh.heads - 1) / sh.heads;
  const int n_seg = static_cast<int>((n_kv + sh.seg - 1) / sh.seg);
  auto* partial = static_cast<float*>(scratch);
  const dim3 grid(static_cast<unsigned>(n_seg), static_cast<unsigned>(a.n_head_kv),
                  static_cast<unsigned>(chunks * seqs.n));
  assert(n_seg <= kMaxSeg);
  const int seg_len = static_cast<int>(sh.seg);
  const int64_t seq_partial = a.n_head * n_seg * (a.head_dim_v + 2);
  const auto segments = [&](auto one, auto several, auto tree_row) {
    launch_kernel(a.branch != nullptr ? tree_row
                  : seqs.n > 1        ? several
                                      : one,
                  grid, kThreads, 0, stream, a, seqs, partial, n_seg, seg_len,
                  static_cast<int>(chunks), seq_partial);
  };
  if (sh.heads == 2) {
    segments(attn_segment<2, false>, attn_segment<2, true>, attn_segment<2, false, true>);
  } else if (sh.heads == 4) {
    segments(attn_segment<4, false>, attn_segment<4, true>, attn_segment<4, false, true>);
  } else {
    segments(attn_segment<kMaxG, false>, attn_segment<kMaxG, true>,
             attn_segment<kMaxG, false, true>);
  }
  launch_kernel(attn_merge, static_cast<unsigned>(a.n_head * seqs.n), kThreads, 0, stream, partial,
                n_seg, static_cast<int>(a.head_dim_v), static_cast<int>(a.n_head), a.sinks, a.out,
                seqs.out_stride);
}

void attention_decode(const AttnDecodeArgs& a, void* scratch, StreamHandle stream) {
  AttnSeqs one;
  one.k[0] = const_cast<uint16_t*>(a.k);  // only read
  one.v[0] = const_cast<uint16_t*>(a.v);
  attention_decode_seqs(a, one, scratch, stream);
}

}  // namespace hypura::compute::cuda
