#include "compute/cuda/attention.h"
#include "compute/cuda/common.cuh"

namespace hypura::compute::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kSeg = static_cast<int>(kAttnSegment);
constexpr int kDvPerThread = static_cast<int>(kAttnMaxHeadDim) / kThreads;

// Partial of one (head, segment): m, l, then head_dim_v accumulators.
__global__ void __launch_bounds__(kThreads)
    attn_segment(AttnDecodeArgs a, float* __restrict__ partial, int n_seg) {
  __shared__ float s_q[kAttnMaxHeadDim];
  __shared__ float s_p[kSeg];
  __shared__ float s_red[kWarps];
  const int seg = blockIdx.x, head = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int hd = static_cast<int>(a.head_dim), hdv = static_cast<int>(a.head_dim_v);
  const int64_t kv_head = head / (a.n_head / a.n_head_kv);
  const int64_t first = a.kv_first + static_cast<int64_t>(seg) * kSeg;
  const int n_keys = static_cast<int>(a.kv_end - first < kSeg ? a.kv_end - first : kSeg);

  for (int d = threadIdx.x; d < hd; d += kThreads) s_q[d] = a.q[head * a.head_dim + d];
  __syncthreads();

  // Scores: a warp per key, lanes over pairs of dimensions.
  float m = -INFINITY;
  for (int j = warp; j < n_keys; j += kWarps) {
    const auto* kr = reinterpret_cast<const __half2*>(a.k + (first + j) * a.k_stride +
                                                      kv_head * a.head_dim);
    float dot = 0.0f;
    for (int d2 = lane; d2 < hd / 2; d2 += 32) {
      const float2 kf = __half22float2(kr[d2]);
      dot += s_q[2 * d2] * kf.x + s_q[2 * d2 + 1] * kf.y;
    }
    dot = warp_sum(dot) * a.kq_scale;
    if (lane == 0) s_p[j] = dot;
    m = fmaxf(m, dot);
  }
  if (lane == 0) s_red[warp] = m;
  __syncthreads();
  m = s_red[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, s_red[w]);
  __syncthreads();  // everyone has read s_red before it is reused for l

  float l = 0.0f;
  for (int j = threadIdx.x; j < n_keys; j += kThreads) {
    const float p = expf(s_p[j] - m);
    s_p[j] = p;
    l += p;
  }
  l = warp_sum(l);
  if (lane == 0) s_red[warp] = l;
  __syncthreads();
  l = 0.0f;
  for (int w = 0; w < kWarps; ++w) l += s_red[w];

  // Weighted sum of V rows: a thread per output dimension.
  float acc[kDvPerThread] = {};
  for (int j = 0; j < n_keys; ++j) {
    const uint16_t* vr = a.v + (first + j) * a.v_stride + kv_head * a.head_dim_v;
    const float p = s_p[j];
#pragma unroll
    for (int k = 0; k < kDvPerThread; ++k) {
      const int d = threadIdx.x + k * kThreads;
      if (d < hdv) acc[k] += p * half_bits_to_float(vr[d]);
    }
  }
  float* out = partial + (static_cast<size_t>(head) * n_seg + seg) * (hdv + 2);
  if (threadIdx.x == 0) {
    out[0] = m;
    out[1] = l;
  }
#pragma unroll
  for (int k = 0; k < kDvPerThread; ++k) {
    const int d = threadIdx.x + k * kThreads;
    if (d < hdv) out[2 + d] = acc[k];
  }
}

// out[head] = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
__global__ void __launch_bounds__(kThreads)
    attn_merge(const float* __restrict__ partial, int n_seg, int hdv, float* __restrict__ out) {
  const int head = blockIdx.x;
  const float* ph = partial + static_cast<size_t>(head) * n_seg * (hdv + 2);
  float big = -INFINITY;
  for (int s = 0; s < n_seg; ++s) big = fmaxf(big, ph[s * (hdv + 2)]);
  float l = 0.0f;
  for (int s = 0; s < n_seg; ++s) l += expf(ph[s * (hdv + 2)] - big) * ph[s * (hdv + 2) + 1];
  const float inv = 1.0f / l;
  for (int d = threadIdx.x; d < hdv; d += kThreads) {
    float acc = 0.0f;
    for (int s = 0; s < n_seg; ++s) acc += expf(ph[s * (hdv + 2)] - big) * ph[s * (hdv + 2) + 2 + d];
    out[static_cast<size_t>(head) * hdv + d] = acc * inv;
  }
}

}  // namespace

size_t attention_scratch_bytes(int64_t n_head, int64_t head_dim_v, int64_t n_kv) {
  const int64_t n_seg = (n_kv + kAttnSegment - 1) / kAttnSegment;
  return static_cast<size_t>(n_head * n_seg * (head_dim_v + 2)) * sizeof(float);
}

void attention_decode(const AttnDecodeArgs& a, void* scratch, StreamHandle stream) {
  const int n_seg = static_cast<int>((a.kv_end - a.kv_first + kAttnSegment - 1) / kAttnSegment);
  auto* partial = static_cast<float*>(scratch);
  attn_segment<<<dim3(static_cast<unsigned>(n_seg), static_cast<unsigned>(a.n_head)), kThreads, 0,
                 stream>>>(a, partial, n_seg);
  attn_merge<<<static_cast<unsigned>(a.n_head), kThreads, 0, stream>>>(
      partial, n_seg, static_cast<int>(a.head_dim_v), a.out);
}

}  // namespace hypura::compute::cuda
