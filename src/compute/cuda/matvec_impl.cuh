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

constexpr int kMatvecWarps = 4;  // rows per thread block

template <class Traits>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int n_blocks, ActQ8 act,
                  float* __restrict__ y, int n_rows) {
  const int row = blockIdx.x * kMatvecWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n_rows) return;
  const uint8_t* wr = w + static_cast<size_t>(row) * row_bytes;
  const int n_items = n_blocks * Traits::kChunks;
  float sum = 0.0f;
#pragma unroll 4
  for (int i = lane; i < n_items; i += 32) {
    const int b = i / Traits::kChunks, c = i % Traits::kChunks;
    sum += Traits::dot(wr + static_cast<size_t>(b) * Traits::kBlockBytes, act, b, c);
  }
  sum = warp_sum(sum);
  if (lane == 0) y[row] = sum;
}

template <class Traits>
void launch_matvec(const MatvecArgs& a) {
  const unsigned grid = static_cast<unsigned>((a.n_rows + kMatvecWarps - 1) / kMatvecWarps);
  matvec_kernel<Traits><<<grid, kMatvecWarps * 32, 0, a.stream>>>(
      static_cast<const uint8_t*>(a.w), a.row_bytes,
      static_cast<int>(a.n_cols / Traits::kBlockElems), a.act, a.y, static_cast<int>(a.n_rows));
}

}  // namespace hypura::compute::cuda
