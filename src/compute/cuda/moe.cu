#include <climits>

#include "compute/cuda/common.cuh"
#include "compute/cuda/moe.h"
#include "compute/cuda/softmax_impl.cuh"

namespace hypura::compute::cuda {
namespace {

// The k largest of p (n_expert) in order, ties to the lower id, and their weights
// renormalised to sum to one (the CPU's routing rule). n_expert * k comparisons: one thread.
__device__ void top_k_row(const float* p, int n_expert, int k, int32_t* sel, float* w) {
  float sum = 0.0f;
  for (int slot = 0; slot < k; ++slot) {
    int best = -1;
    for (int e = 0; e < n_expert; ++e) {
      bool taken = false;
      for (int s = 0; s < slot; ++s) taken |= sel[s] == e;
      if (taken) continue;
      if (best < 0 || p[e] > p[best]) best = e;
    }
    sel[slot] = best;
    w[slot] = p[best];
    sum = __fadd_rn(sum, p[best]);
  }
  for (int slot = 0; slot < k; ++slot) w[slot] = __fdiv_rn(w[slot], sum);
}

// One thread per token.
__global__ void top_k_kernel(const float* __restrict__ probs, int n_tokens, int n_expert, int k,
                             int32_t* __restrict__ selected, float* __restrict__ weights) {
  grid_dep_wait();
  grid_dep_launch();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n_tokens) return;
  top_k_row(probs + static_cast<int64_t>(t) * n_expert, n_expert, k,
            selected + static_cast<int64_t>(t) * k, weights + static_cast<int64_t>(t) * k);
}

constexpr int kMaxGroups = 64;
// ggml clamps the weights' sum to the smallest normal fp16 before dividing (routing.cc).
constexpr float kMinWeightSum = 6.103515625e-5f;

// The better of two (score, id) candidates: the higher score, the lower id on ties; an id
// of INT_MAX is no candidate (it loses every tie, and -inf scores tie).
__device__ __forceinline__ void better(float& s, int& id, float s2, int id2) {
  if (s2 > s || (s2 == s && id2 < id)) {
    s = s2;
    id = id2;
  }
}

// compute::top_k by one warp, every lane of which calls it: out[0..k) the k best of s[0..n)
// by slot, ties to the lower id; out is shared memory, read back by the whole warp.
__device__ void warp_top_k(const float* s, int n, int k, int32_t* out) {
  const int lane = threadIdx.x % 32;
  for (int slot = 0; slot < k; ++slot) {
    float best = -INFINITY;
    int id = INT_MAX;
    for (int i = lane; i < n; i += 32) {
      bool taken = false;
      for (int j = 0; j < slot; ++j) taken |= out[j] == i;
      if (!taken) better(best, id, s[i], i);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      better(best, id, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, id, o));
    }
    if (lane == 0) out[slot] = id;
    __syncwarp();
  }
}

// One block per token, as model::route_row: the logit bias, the gating (the block's
// softmax, or an elementwise sigmoid), the selection scores (with exp_probs_b) in shared
// memory, the groups' scores and mask (warp 0: a lane per group), the top k (warp 0), then
// the weights (thread 0, in slot order as the CPU sums them).
__global__ void __launch_bounds__(kSoftmaxThreads)
    route_kernel(float* __restrict__ probs, int n_expert, int k, int32_t* __restrict__ selected,
                 float* __restrict__ weights, RouteOptions o) {
  extern __shared__ float score[];  // (n_expert) selection scores, then the k ids
  __shared__ float group_score[kMaxGroups];
  __shared__ int32_t group_used[kMaxGroups];
  grid_dep_wait();
  grid_dep_launch();
  const int64_t t = blockIdx.x;
  float* p = probs + t * n_expert;
  auto* sel = reinterpret_cast<int32_t*>(score + n_expert);
  if (o.logit_bias != nullptr) {
    for (int i = threadIdx.x; i < n_expert; i += kSoftmaxThreads)
      p[i] = __fadd_rn(p[i], o.logit_bias[i]);
    __syncthreads();
  }
  if (o.gating == RouteGating::kSoftmax) {
    softmax_row(p, n_expert);
    __syncthreads();
  } else if (o.gating == RouteGating::kSigmoid) {
    for (int i = threadIdx.x; i < n_expert; i += kSoftmaxThreads)
      p[i] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-p[i])));
  }
  for (int i = threadIdx.x; i < n_expert; i += kSoftmaxThreads)
    score[i] = o.select_bias != nullptr ? __fadd_rn(p[i], o.select_bias[i]) : p[i];
  __syncthreads();
  if (o.n_groups > 1) {
    const int per = n_expert / o.n_groups;
    if (threadIdx.x < 32) {
      for (int g = threadIdx.x; g < o.n_groups; g += 32) {  // its two best, ties to the lower
        const float* gs = score + g * per;
        int b0 = 0;
        for (int i = 1; i < per; ++i) b0 = gs[i] > gs[b0] ? i : b0;
        int b1 = b0 == 0 ? 1 : 0;
        for (int i = 0; i < per; ++i) b1 = i != b0 && gs[i] > gs[b1] ? i : b1;
        group_score[g] = __fadd_rn(gs[b0], gs[b1]);
      }
      __syncwarp();
      warp_top_k(group_score, o.n_groups, o.n_group_used, group_used);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n_expert; i += kSoftmaxThreads) {
      bool used = false;
      for (int j = 0; j < o.n_group_used; ++j) used |= group_used[j] == i / per;
      if (!used) score[i] = -INFINITY;
    }
    __syncthreads();
  }
  if (threadIdx.x < 32) warp_top_k(score, n_expert, k, sel);
  if (threadIdx.x != 0) return;
  int32_t* out_sel = selected + t * k;
  float* w = weights + t * k;
  for (int slot = 0; slot < k; ++slot) {
    out_sel[slot] = sel[slot];
    w[slot] = p[sel[slot]];
  }
  if (o.gating == RouteGating::kSoftmaxOfK) {  // compute::softmax of the k
    float m = -INFINITY;
    for (int slot = 0; slot < k; ++slot) m = fmaxf(m, w[slot]);
    double total = 0.0;
    for (int slot = 0; slot < k; ++slot) {
      w[slot] = expf(w[slot] - m);
      total += static_cast<double>(w[slot]);
    }
    const float inv = static_cast<float>(1.0 / total);
    for (int slot = 0; slot < k; ++slot) w[slot] = __fmul_rn(w[slot], inv);
  }
  if (o.norm) {
    float sum = 0.0f;
    for (int slot = 0; slot < k; ++slot) sum = __fadd_rn(sum, w[slot]);
    sum = fmaxf(sum, kMinWeightSum);
    for (int slot = 0; slot < k; ++slot) w[slot] = __fdiv_rn(w[slot], sum);
  }
  if (o.scale != 1.0f) {
    for (int slot = 0; slot < k; ++slot) w[slot] = __fmul_rn(w[slot], o.scale);
  }
}

// rows[r, :] += bias[ids[r], :] (width floats per row).
__global__ void add_rows_by_id_kernel(float* __restrict__ rows, const float* __restrict__ bias,
                                      const int32_t* __restrict__ ids, int64_t n, int width) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * width) return;
  const int64_t r = i / width;
  rows[i] = __fadd_rn(rows[i], bias[static_cast<int64_t>(ids[r]) * width + i % width]);
}

__global__ void gather_kernel(const float* __restrict__ x, const int32_t* __restrict__ pairs,
                              int64_t n, int k, int width, float* __restrict__ out) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * width) return;
  const int64_t r = i / width;
  out[i] = x[static_cast<int64_t>(pairs[r] / k) * width + i % width];
}

__global__ void scatter_kernel(const float* __restrict__ src, const int32_t* __restrict__ pairs,
                               int64_t n, int width, float* __restrict__ dst) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * width) return;
  const int64_t r = i / width;
  dst[static_cast<int64_t>(pairs[r]) * width + i % width] = src[i];
}

__global__ void combine_kernel(const float* __restrict__ slot_out, const float* __restrict__ w,
                               int64_t n, int k, int width, float* __restrict__ out,
                               float* __restrict__ add_to, const float* __restrict__ shared) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * width) return;
  const int64_t t = i / width, c = i % width;
  const float* rows = slot_out + t * k * width + c;
  float acc = __fmul_rn(rows[0], w[t * k]);
  for (int s = 1; s < k; ++s) acc = __fadd_rn(acc, __fmul_rn(rows[s * width], w[t * k + s]));
  if (shared != nullptr) acc = __fadd_rn(acc, shared[i]);
  out[i] = acc;
  if (add_to != nullptr) add_to[i] = __fadd_rn(add_to[i], acc);
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>((n + 255) / 256);
}

}  // namespace

void moe_top_k(const float* probs, int64_t n_tokens, int64_t n_expert, int64_t k, int32_t* selected,
               float* weights, StreamHandle stream) {
  if (n_tokens == 0) return;
  launch_kernel(top_k_kernel, static_cast<unsigned>((n_tokens + 63) / 64), 64, 0, stream, probs,
                static_cast<int>(n_tokens), static_cast<int>(n_expert), static_cast<int>(k),
                selected, weights);
}

void moe_route(float* probs, int64_t n_tokens, int64_t n_expert, int64_t k, int32_t* selected,
               float* weights, StreamHandle stream, const RouteOptions& options) {
  if (n_tokens == 0) return;
  const size_t smem = static_cast<size_t>(n_expert + k) * 4;
  launch_kernel(route_kernel, static_cast<unsigned>(n_tokens), kSoftmaxThreads, smem, stream, probs,
                static_cast<int>(n_expert), static_cast<int>(k), selected, weights, options);
}

void add_rows_by_id(float* rows, const float* bias, const int32_t* ids, int64_t n, int64_t width,
                    StreamHandle stream) {
  if (n == 0 || bias == nullptr) return;
  launch_kernel(add_rows_by_id_kernel, blocks_for(n * width), 256, 0, stream, rows, bias, ids, n,
                static_cast<int>(width));
}

void gather_rows(const float* x, const int32_t* pairs, int64_t n, int64_t k, int64_t width,
                 float* out, StreamHandle stream) {
  if (n == 0) return;
  launch_kernel(gather_kernel, blocks_for(n * width), 256, 0, stream, x, pairs, n,
                static_cast<int>(k), static_cast<int>(width), out);
}

void scatter_rows(const float* src, const int32_t* pairs, int64_t n, int64_t width, float* dst,
                  StreamHandle stream) {
  if (n == 0) return;
  launch_kernel(scatter_kernel, blocks_for(n * width), 256, 0, stream, src, pairs, n,
                static_cast<int>(width), dst);
}

void moe_combine(const float* slot_out, const float* weights, int64_t n_tokens, int64_t k,
                 int64_t width, float* out, StreamHandle stream, float* add_to,
                 const float* shared) {
  if (n_tokens == 0) return;
  launch_kernel(combine_kernel, blocks_for(n_tokens * width), 256, 0, stream, slot_out, weights,
                n_tokens, static_cast<int>(k), static_cast<int>(width), out, add_to, shared);
}

}  // namespace hypura::compute::cuda
