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
#include "compute/cuda/matvec_launch.h"

namespace hypura::compute::cuda {

constexpr int kMatvecWarps = 4;  // warps per thread block
constexpr int kMatvecMaxRows = 2;  // rows per warp, at most
constexpr int kMatvecUnroll = 4;   // item iterations whose loads are issued together
// Tall matrices (more rows than about 1.5 waves of one-row warps on an H200) take two
// rows per warp: fewer waves and twice the loads in flight per warp (measured: output
// 128256x4096 Q4_K 94 -> 82 us, ffn_gate 14336x4096 12.5 -> 11.8 us; shorter matrices
// lose with fewer warps, ffn_down 4096x14336 14.2 -> 15.4 us). docs/GPU.md, device call 4.
constexpr int64_t kMatvecTwoRowsFrom = 12288;

// `rows` (1 or 2) rows per warp, their items interleaved so that rows * kMatvecUnroll loads
// per lane are in flight before the first is used.
template <class Traits>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int n_blocks, ActQ8 act,
                  float* __restrict__ y, int n_rows, int rows) {
  const int row0 = (blockIdx.x * kMatvecWarps + threadIdx.x / 32) * rows;
  const int lane = threadIdx.x % 32;
  if (row0 >= n_rows) return;
  const uint8_t* wr[kMatvecMaxRows];
#pragma unroll
  for (int r = 0; r < kMatvecMaxRows; ++r) {
    // A second row past the end repeats the last one (its sum is dropped).
    wr[r] = w + static_cast<size_t>(min(row0 + r, n_rows - 1)) * row_bytes;
  }
  const int n_items = n_blocks * Traits::kChunks;
  float sum[kMatvecMaxRows] = {};
#pragma unroll kMatvecUnroll
  for (int i = lane; i < n_items; i += 32) {
    const int b = i / Traits::kChunks, c = i % Traits::kChunks;
#pragma unroll
    for (int r = 0; r < kMatvecMaxRows; ++r) {
      if (r < rows) {  // uniform over the grid
        sum[r] += Traits::dot(wr[r] + static_cast<size_t>(b) * Traits::kBlockBytes, act, b, c);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kMatvecMaxRows; ++r) {
    const float v = warp_sum(sum[r]);
    if (lane == 0 && r < rows && row0 + r < n_rows) y[row0 + r] = v;
  }
}

template <class Traits>
void launch_matvec(const MatvecArgs& a) {
  const int rows = a.n_rows >= kMatvecTwoRowsFrom ? 2 : 1;
  const int64_t rows_per_block = kMatvecWarps * rows;
  const unsigned grid = static_cast<unsigned>((a.n_rows + rows_per_block - 1) / rows_per_block);
  matvec_kernel<Traits><<<grid, kMatvecWarps * 32, 0, a.stream>>>(
      static_cast<const uint8_t*>(a.w), a.row_bytes,
      static_cast<int>(a.n_cols / Traits::kBlockElems), a.act, a.y, static_cast<int>(a.n_rows),
      rows);
}

}  // namespace hypura::compute::cuda
