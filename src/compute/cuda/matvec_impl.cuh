// The matrix-vector kernel shared by every weight format (included by matvec_*.cu only).
//
// One warp per weight row. A row is cut into work items of (block, chunk); lane l takes
// items l, l + 32, ... so that a warp's loads of one item index cover consecutive bytes of
// the row (coalesced). A format's Traits say how big a block is, how many chunks it has
// and how one chunk dots with the activations:
//   kBlockBytes, kBlockElems, kChunks (a power of two)
//   static float dot(const uint8_t* block, const ActQ8& act, int block_index, int chunk)
// Integer formats multiply 8-bit quants with dp4a, exact in integers, and scale once per
// chunk; the sum over chunks and lanes is in float, so results differ from the CPU's
// (which sums whole blocks first) only by float rounding.
#pragma once

#include "compute/cuda/common.cuh"
#include "compute/cuda/matvec_impl_config.h"
#include "compute/cuda/matvec_launch.h"

namespace hypura::compute::cuda {

constexpr int kMatvecWarps = 4;   // warps per thread block
constexpr int kMatvecUnroll = 4;  // item iterations whose loads are issued together
// The shape policy (launch_matvec), from every configuration timed at the four Llama-3-8B
// shapes on an H200 (132 SMs; docs/GPU.md, device call 6):
//   n_rows >= 65536 (the output head): two rows per warp (Q4_K 93 -> 84 us, Q6_K 161 ->
//     148, Q8_0 139 -> 136; F16 even);
//   n_rows >= 12288 (ffn_gate/up): two rows per warp when a lane has fewer than 8 items
//     of a row (K-quants: Q4_K 12.7 -> 12.4 us, Q6_K 20.7 -> 19.8), else each row split
//     over two warps (F16 33.4 -> 31.5, Q8_0 18.7 -> 18.2);
//   n_rows <= 4224 with >= 8 items per lane, quantized (ffn_down): split over two warps
//     (Q4_K 14.2 -> 13.2 us; F16 loses 5% there and keeps one row);
//   float formats with n_rows <= kMatvecSplitFloatRows and >= 8 items per lane: split over
//     two warps (an F16 k/v of 1024 rows, one per warp, leaves too few bytes in flight);
//   else one row per warp.
constexpr int64_t kMatvecOutputRows = 65536;
constexpr int64_t kMatvecTallRows = 12288;
constexpr int64_t kMatvecShortRows = 4224;
constexpr int64_t kMatvecSplitFloatRows = 1024;

// kRows (1 or 2) rows per warp, their items interleaved so that kRows * kMatvecUnroll loads
// per lane are in flight before the first is used; with kSplit == 2 a pair of warps shares
// a row, each taking every other 32 items, and their sums meet in shared memory (fixed
// order: results depend only on the shape). Both are compile-time: as run-time values they
// cost registers and occupancy (measured, device call 5).
//
// kGrouped: blockIdx.y is a pair of MatvecGroup (its own expert, activation row and output
// row); a separate instantiation, so the plain products keep their registers.
template <class Traits, int kRows, int kSplit, bool kGrouped = false>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int n_blocks, ActQ8 act,
                  float* __restrict__ y, int n_rows, MatvecGroup group,
                  float* __restrict__ add_to) {
  __shared__ float s_part[kSplit == 2 ? kMatvecWarps : 1][kRows];
  if constexpr (kGrouped) {  // the experts come from the routing kernels: wait for them
    grid_dep_wait();
    grid_dep_launch();
    const int pair = blockIdx.y, a = pair / group.act_div;
    if (blockIdx.z == 1) {
      w = group.w_second;
      y = group.y_second;
    }
    w += static_cast<size_t>(group.ids[pair]) * group.expert_bytes;
    if (act.q != nullptr) act.q += a * group.q_stride;
    if (act.d != nullptr) act.d += a * group.d_stride;
    if (act.s != nullptr) act.s += a * (group.q_stride / 32);
    if (act.x != nullptr) act.x += a * group.q_stride;
    y += static_cast<int64_t>(pair) * n_rows;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (kMatvecWarps / kSplit) + warp / kSplit) * kRows;
  const int part = warp % kSplit;
  const bool live = row0 < n_rows;  // no early return: split blocks meet at a barrier
  const uint8_t* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    // A second row past the end repeats the last one (its sum is dropped).
    wr[r] = w + static_cast<size_t>(min(row0 + r, n_rows - 1)) * row_bytes;
  }
  if constexpr (!kGrouped) {
    grid_dep_wait();
    grid_dep_launch();
  }
  const int n_items = live ? n_blocks * Traits::kChunks : 0;
  float sum[kRows] = {};
#pragma unroll kMatvecUnroll
  for (int i = part * 32 + lane; i < n_items; i += 32 * kSplit) {
    const int b = i / Traits::kChunks, c = i % Traits::kChunks;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      sum[r] += Traits::dot(wr[r] + static_cast<size_t>(b) * Traits::kBlockBytes, act, b, c);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) sum[r] = warp_sum(sum[r]);
  if constexpr (kSplit == 2) {
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) s_part[warp][r] = sum[r];
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r) sum[r] = s_part[warp][r] + s_part[warp + 1][r];
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (lane == 0 && row0 + r < n_rows) y[row0 + r] = sum[r];
    // The residual (one row per warp only: with it the two-row kernels took more
    // registers). Lane 1, not lane 0: that kept the quantized kernels at 32 registers.
    if constexpr (kRows == 1) {
      if (lane == 1 && row0 < n_rows && add_to != nullptr) add_to[row0] += sum[0];
    }
  }
}

// Batched products: one warp per row, the row's (block, chunk) items read once for up to
// kMatvecMaxTokens activation rows (the block bytes stay in L1 between the tokens' dots);
// each token's sum is reduced in the plain kernel's order (lane partials, then the warp
// tree), so a token's result does not depend on how many share the launch.
template <class Traits>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_batched_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int n_blocks, ActQ8 act,
                          float* __restrict__ y, int n_rows, int n_tok, int64_t q_stride,
                          int64_t d_stride) {
  grid_dep_wait();
  grid_dep_launch();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kMatvecWarps + warp;
  if (row >= n_rows) return;
  const uint8_t* wr = w + static_cast<size_t>(row) * row_bytes;
  const int n_items = n_blocks * Traits::kChunks;
  float sum[kMatvecMaxTokens] = {};
  for (int i = lane; i < n_items; i += 32) {
    const int b = i / Traits::kChunks, c = i % Traits::kChunks;
    const uint8_t* block = wr + static_cast<size_t>(b) * Traits::kBlockBytes;
#pragma unroll
    for (int t = 0; t < kMatvecMaxTokens; ++t) {
      if (t < n_tok) {
        ActQ8 at = act;
        if (at.q != nullptr) at.q += t * q_stride;
        if (at.d != nullptr) at.d += t * d_stride;
        if (at.s != nullptr) at.s += t * (q_stride / 32);
        if (at.x != nullptr) at.x += t * q_stride;
        sum[t] += Traits::dot(block, at, b, c);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kMatvecMaxTokens; ++t) {
    if (t < n_tok) {
      const float v = warp_sum(sum[t]);
      if (lane == 0) y[static_cast<int64_t>(t) * n_rows + row] = v;
    }
  }
}

template <class Traits>
void launch_matvec_batched(const MatvecArgs& a) {
  const unsigned grid = static_cast<unsigned>((a.n_rows + kMatvecWarps - 1) / kMatvecWarps);
  launch_kernel(matvec_batched_kernel<Traits>, grid, kMatvecWarps * 32, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.row_bytes,
                static_cast<int>(a.n_cols / Traits::kBlockElems), a.act, a.y,
                static_cast<int>(a.n_rows), a.n_tok, a.q_stride, a.d_stride);
}

template <class Traits, int kRows, int kSplit>
void launch_matvec_config(const MatvecArgs& a) {
  const int64_t rows_per_block = kMatvecWarps / kSplit * kRows;
  const unsigned grid = static_cast<unsigned>((a.n_rows + rows_per_block - 1) / rows_per_block);
  launch_kernel(matvec_kernel<Traits, kRows, kSplit>, grid, kMatvecWarps * 32, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.row_bytes,
                static_cast<int>(a.n_cols / Traits::kBlockElems), a.act, a.y,
                static_cast<int>(a.n_rows), MatvecGroup{}, a.add_to);
}

// Grouped products: one row per warp (experts' matrices are short; one configuration keeps
// the instantiations few).
template <class Traits>
void launch_matvec_grouped(const MatvecArgs& a) {
  const dim3 grid(static_cast<unsigned>((a.n_rows + kMatvecWarps - 1) / kMatvecWarps),
                  static_cast<unsigned>(a.group->n_pairs), a.group->w_second != nullptr ? 2u : 1u);
  launch_kernel(matvec_kernel<Traits, 1, 1, true>, grid, kMatvecWarps * 32, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.row_bytes,
                static_cast<int>(a.n_cols / Traits::kBlockElems), a.act, a.y,
                static_cast<int>(a.n_rows), *a.group, nullptr);
}

template <class Traits>
void launch_matvec(const MatvecArgs& a) {
  if (a.group != nullptr) {
    launch_matvec_grouped<Traits>(a);
    return;
  }
  if (a.n_tok > 1) {
    launch_matvec_batched<Traits>(a);
    return;
  }
  const int64_t items_per_lane = a.n_cols / Traits::kBlockElems * Traits::kChunks / 32;
  constexpr bool kFloat = Traits::kBlockElems < 32;  // F32 / F16 / BF16
  int config = 0;                                    // one row per warp
  if (a.n_rows >= kMatvecOutputRows) {
    config = 1;  // two rows per warp
  } else if (a.n_rows >= kMatvecTallRows) {
    config = items_per_lane < 8 ? 1 : 2;  // 2: split over two warps
  } else if (a.n_rows <= kMatvecShortRows && items_per_lane >= 8 && !kFloat) {
    config = 2;
  } else if (kFloat && a.n_rows <= kMatvecSplitFloatRows && items_per_lane >= 8) {
    config = 2;
  }
  if (g_matvec_config_override >= 0) config = g_matvec_config_override;
  if (a.add_to != nullptr && config == 1) config = 0;  // the residual needs one row per warp
  switch (config) {
    case 1:
      launch_matvec_config<Traits, 2, 1>(a);
      break;
    case 2:
      launch_matvec_config<Traits, 1, 2>(a);
      break;
    default:
      launch_matvec_config<Traits, 1, 1>(a);
      break;
  }
}

}  // namespace hypura::compute::cuda
