#include "compute/cuda/common.cuh"
#include "compute/cuda/moe.h"
#include "compute/cuda/softmax_impl.cuh"

namespace hypura::compute::cuda {
namespace {

// The k largest of p (n_expert) in order, ties to the lower id, and their weights
// renormalised to sum to one (the CPU's routing rule), or with softmax_of_k their softmax
// (p are then logits: gpt-oss). n_expert * k comparisons, a few thousand at most: one thread.
__device__ void top_k_row(const float* p, int n_expert, int k, int32_t* sel, float* w,
                          bool softmax_of_k = false) {
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
  if (softmax_of_k) {  // compute::softmax: the first slot holds the max
    double total = 0.0;
    for (int slot = 0; slot < k; ++slot) {
      w[slot] = expf(w[slot] - p[sel[0]]);
      total += static_cast<double>(w[slot]);
    }
    const float inv = static_cast<float>(1.0 / total);
    for (int slot = 0; slot < k; ++slot) w[slot] = __fmul_rn(w[slot], inv);
    return;
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

// One block per token: the router bias (if any) and the softmax of its router logits, then
// its top k (thread 0), in one launch instead of two; softmax_of_k: top k of the logits,
// then their softmax.
__global__ void __launch_bounds__(kSoftmaxThreads)
    route_kernel(float* __restrict__ probs, int n_expert, int k, int32_t* __restrict__ selected,
                 float* __restrict__ weights, const float* __restrict__ bias, bool softmax_of_k) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t t = blockIdx.x;
  float* p = probs + t * n_expert;
  if (bias != nullptr) {
    for (int i = threadIdx.x; i < n_expert; i += kSoftmaxThreads) p[i] = __fadd_rn(p[i], bias[i]);
    __syncthreads();
  }
  if (!softmax_of_k) softmax_row(p, n_expert);
  __syncthreads();  // the row's probabilities, written by every thread, for thread 0
  if (threadIdx.x == 0) top_k_row(p, n_expert, k, selected + t * k, weights + t * k, softmax_of_k);
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
                               float* __restrict__ add_to) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * width) return;
  const int64_t t = i / width, c = i % width;
  const float* rows = slot_out + t * k * width + c;
  float acc = __fmul_rn(rows[0], w[t * k]);
  for (int s = 1; s < k; ++s) acc = __fadd_rn(acc, __fmul_rn(rows[s * width], w[t * k + s]));
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
               float* weights, StreamHandle stream, const float* bias, bool softmax_of_k) {
  if (n_tokens == 0) return;
  launch_kernel(route_kernel, static_cast<unsigned>(n_tokens), kSoftmaxThreads, 0, stream, probs,
                static_cast<int>(n_expert), static_cast<int>(k), selected, weights, bias,
                softmax_of_k);
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
                 int64_t width, float* out, StreamHandle stream, float* add_to) {
  if (n_tokens == 0) return;
  launch_kernel(combine_kernel, blocks_for(n_tokens * width), 256, 0, stream, slot_out, weights,
                n_tokens, static_cast<int>(k), static_cast<int>(width), out, add_to);
}

}  // namespace hypura::compute::cuda
