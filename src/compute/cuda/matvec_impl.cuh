// The matrix-vector kernel shared by every weight format (included by matvec_*.cu only).
//
// One warp per weight row. A row is cut into work items of (block, chunk); lane l takes
// items l, l + 32, ... so that a warp's loads of one item index cover consecutive bytes of
// the row (coalesced). A format's Traits say how big a block is, how many chunks it has
// and how one chunk dots with the activations:
//   kBlockBytes, kBlockElems, kChunks (a power of two)
//   static float dot(const uint8_t* block, const ActQ8& act, int block_index, int chunk)
// and the same dot in two steps, for batched products, which unpack a chunk once for all
// of their tokens:
//   struct Chunk                                  (the unpacked weights, in registers)
//   static Chunk load(const uint8_t* block, int chunk)
//   static float dot(const Chunk& w, const ActQ8& act, int block_index, int chunk)
// Both compute the same integers and the same float operations in the same order. The
// single-token kernels keep the one-step form: built from the two steps, ptxas gave them
// 4-10 more registers (Q4_K 32 -> 38), so fewer warps in flight.
// Integer formats multiply 8-bit quants with dp4a, exact in integers, and scale once per
// chunk; the sum over chunks and lanes is in float, so results differ from the CPU's
// (which sums whole blocks first) only by float rounding.
#pragma once

#include <algorithm>
#include <type_traits>

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
// row; no ids: one pair, the tensors themselves); a separate instantiation, so the plain
// products keep their registers.
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
    if (group.ids != nullptr) w += static_cast<size_t>(group.ids[pair]) * group.expert_bytes;
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

// Token t's activations in a batched product (rows q_stride quants and d_stride scales
// apart, as in MatvecGroup).
__device__ __forceinline__ ActQ8 token_act(ActQ8 a, int t, int64_t q_stride, int64_t d_stride) {
  if (a.q != nullptr) a.q += t * q_stride;
  if (a.d != nullptr) a.d += t * d_stride;
  if (a.s != nullptr) a.s += t * (q_stride / 32);
  if (a.x != nullptr) a.x += t * q_stride;
  return a;
}

// Batched products of n_tok <= kTok activation rows: each (block, chunk) item loaded and
// unpacked once and dotted with every token (kU items' loads in flight before the first is
// used while the tokens are few). One row per warp, or with kSplit == 2 a pair of warps per
// row, as the single-token kernel: each token sums its items in that kernel's order (lane
// partials in item order, the warp tree, the pair's sum), so its result is the single-token
// product's of the same configuration bit for bit, whatever the batch.
template <class Traits, int kTok, int kSplit>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_batched_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int n_blocks, ActQ8 act,
                          float* __restrict__ y, int n_rows, int n_tok, int64_t q_stride,
                          int64_t d_stride) {
  constexpr int kU = kTok <= 4 ? 2 : 1;
  __shared__ float s_part[kSplit == 2 ? kMatvecWarps : 1][kTok];
  grid_dep_wait();
  grid_dep_launch();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * (kMatvecWarps / kSplit) + warp / kSplit;
  const int part = warp % kSplit;
  const bool live = row < n_rows;  // no early return: split rows meet at a barrier
  const uint8_t* wr = w + static_cast<size_t>(live ? row : 0) * row_bytes;
  const int n_items = live ? n_blocks * Traits::kChunks : 0;
  float sum[kTok] = {};
  for (int i0 = part * 32 + lane; i0 < n_items; i0 += 32 * kSplit * kU) {
    typename Traits::Chunk chunk[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = i0 + 32 * kSplit * u;
      if (i < n_items) {
        chunk[u] = Traits::load(wr + static_cast<size_t>(i / Traits::kChunks) * Traits::kBlockBytes,
                                i % Traits::kChunks);
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = i0 + 32 * kSplit * u;
      if (i >= n_items) break;
      const int b = i / Traits::kChunks, c = i % Traits::kChunks;
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (t < n_tok) sum[t] += Traits::dot(chunk[u], token_act(act, t, q_stride, d_stride), b, c);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTok; ++t) sum[t] = warp_sum(sum[t]);
  if constexpr (kSplit == 2) {
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) s_part[warp][t] = sum[t];
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int t = 0; t < kTok; ++t) sum[t] = s_part[warp][t] + s_part[warp + 1][t];
  }
  if (lane != 0 || !live) return;
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    if (t < n_tok) y[static_cast<int64_t>(t) * n_rows + row] = sum[t];
  }
}

// Formats with a tensor-core form (Traits::MmaScale): a chunk is two halves of 16 quants,
// each half under one integer scale (Q4_K, Q5_K, Q6_K), and a warp takes chunks q4 and
// q4 + 4 of a block (below):
//   static MmaRaw mma_fetch(const uint8_t* block, int q4, int t)  (the loads, no use of them)
//   static MmaQuants mma_quants(const MmaRaw&, int q4, int s)  (chunk q4 + 4s: bytes
//     4t..4t+3 of each half, as int8, the A fragment's share of lane t of a quad)
//   static int mma_act(int chunk), kMmaHi   (the halves' activations: elements mma_act(c)
//     and mma_act(c) + kMmaHi of the block)
//   static MmaScale mma_scale(const MmaRaw&, const uint8_t* block, int q4, int s)
//   static float mma_value(const MmaScale&, float dx, int lo, int hi, int sx_lo, int sx_hi)
//     (the chunk's float from the halves' integer dots, and with kMmaSums the sums of
//     their activations: the same integers and float operations as Traits::dot)

// Lane t's four int8 quants of each half of a chunk (bytes 4t..4t+3 of the half).
struct MmaQuants {
  uint32_t lo, hi;
};

template <class T, class = void>
constexpr bool kHasMma = false;
template <class T>
constexpr bool kHasMma<T, std::void_t<typename T::MmaScale>> = true;

// A warp of the tensor-core products (mma_rows, below) holds only one group's loads in
// flight and computes long between them, so each part asks L2 for its groups `ahead` groups
// before it loads them (0: none): lanes t == 0 of its first warp, rows g and g + 8 of the
// tile.
template <class Traits>
__device__ __forceinline__ void prefetch_group(const uint8_t* row, int pg, int n_blocks) {
  if (pg >= (n_blocks + 3) / 4) return;
  const auto from = reinterpret_cast<uintptr_t>(row) + size_t{4} * pg * Traits::kBlockBytes;
  const auto to = reinterpret_cast<uintptr_t>(row) +
                  static_cast<size_t>(min(4 * pg + 4, n_blocks)) * Traits::kBlockBytes;
  const uintptr_t a = (from + 15) & ~uintptr_t{15}, b = to & ~uintptr_t{15};  // whole units
  if (b > a) prefetch_l2(reinterpret_cast<const void*>(a), static_cast<uint32_t>(b - a));
}

// The tile's rows g and g + 8 (past the end: the last row, whose results are dropped).
__device__ __forceinline__ void mma_tile_rows(const uint8_t* w, size_t row_bytes, int n_rows,
                                              const uint8_t* (&wr)[2]) {
  const int row0 = blockIdx.x * 16, g = threadIdx.x % 32 / 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    wr[r] = w + static_cast<size_t>(min(row0 + g + 8 * r, n_rows - 1)) * row_bytes;
  }
}

// The groups a part asks for before its loop: 1 .. ahead - 1 on from its first.
template <class Traits, int kSplit>
__device__ __forceinline__ void prefetch_first(const uint8_t* w, size_t row_bytes, int n_rows,
                                               int n_blocks, int ahead) {
  if (threadIdx.x % 128 >= 32 || threadIdx.x % 4 != 0) return;
  const uint8_t* wr[2];
  mma_tile_rows(w, row_bytes, n_rows, wr);
  const int part = threadIdx.x / 128;
  for (int d = 1; d < ahead; ++d) {
    for (const uint8_t* row : wr) prefetch_group<Traits>(row, part + kSplit * d, n_blocks);
  }
}

// The tokens of one mma_rows call: token t < n_tok multiplies activation row act_row(t)
// into output row out_row(t) (n_rows floats apart): t itself, or with kGrouped pair[t]
// (pair i's activations are row i / act_div).
template <bool kGrouped>
struct MmaTokens {
  int n_tok;
  const int* pair;  // kGrouped: shared memory
  int act_div;
  int64_t q_stride, d_stride;
  __device__ __forceinline__ int out_row(int t) const { return kGrouped ? pair[t] : t; }
  __device__ __forceinline__ int act_row(int t) const { return kGrouped ? pair[t] / act_div : t; }
};

// The warps' partial sums of every output, for the tree across warps.
template <int kSplit, int kTiles>
using MmaTree = float[4 * kSplit][kTiles * 4][32];

// Batched products of up to 8 * kTiles tokens on the tensor cores. A block of 4 * kSplit
// warps takes 16 rows. Warp (part, q4) takes, of every kSplit-th group of 32 items from group
// `part` on, the items whose index is q4 mod 4: what lanes q4, q4 + 4, .., q4 + 28 of the
// single-token kernel (of the same split) take. Per item, int8 m16n8k16 products give every
// (row, token) the integer dots of dp4a; the float step is the format's. Each of the warp's
// eight lane partials sums its items in item order, and the partials meet in the order of
// warp_sum's tree (lane bits 4, 3, 2 inside the warp, bits 1 and 0 across warps), then the
// split's pair: every token's result is its single-token product bit for bit, and a weight
// row is read once for all tokens.
//
// mma_rows: one block's 16 rows of w times the tokens' activations into y (the whole block
// calls it; it returns with s_tree free again).
template <class Traits, int kSplit, int kTiles, bool kGrouped>
__device__ __forceinline__ void mma_rows(const uint8_t* __restrict__ w, size_t row_bytes,
                                         int n_blocks, const ActQ8& act, float* __restrict__ y,
                                         int n_rows, const MmaTokens<kGrouped>& tok, int ahead,
                                         MmaTree<kSplit, kTiles>& s_tree) {
  static_assert(Traits::kChunks == 8, "a warp's group items are chunks q4 and q4 + 4 of 4 blocks");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int part = warp / 4, q4 = warp % 4;
  const int row0 = blockIdx.x * 16;
  const uint8_t* wr[2];
  mma_tile_rows(w, row_bytes, n_rows, wr);
  const bool prefetcher = ahead > 0 && q4 == 0 && t == 0;
  // Tile k: the B fragment's token is 8k + g; the outputs' tokens 8k + 2t and 8k + 2t + 1
  // (tokens past n_tok repeat the last one; their results are dropped).
  const int8_t* xb[kTiles];
  const float* xd[kTiles][2];
#pragma unroll
  for (int k = 0; k < kTiles; ++k) {
    xb[k] = act.q + tok.act_row(min(8 * k + g, tok.n_tok - 1)) * tok.q_stride + 4 * t;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      xd[k][e] = act.d + tok.act_row(min(8 * k + 2 * t + e, tok.n_tok - 1)) * tok.d_stride;
    }
  }
  const bool second_tile = !kGrouped || tok.n_tok > 8;  // a grouped call's may be empty
  float sum[8][kTiles][4] = {};  // [lane partial j: lane q4 + 4j][tile][output]
  constexpr uint32_t kOnes = 0x01010101u;
  const int n_groups = (n_blocks + 3) / 4;
  for (int grp = part; grp < n_groups; grp += kSplit) {
    if (prefetcher) {
      for (const uint8_t* row : wr) prefetch_group<Traits>(row, grp + kSplit * ahead, n_blocks);
    }
    typename Traits::MmaRaw raw[4][2];  // [block][row]: the group's loads in flight
#pragma unroll
    for (int b4 = 0; b4 < 4; ++b4) {
      const size_t off = static_cast<size_t>(min(grp * 4 + b4, n_blocks - 1)) * Traits::kBlockBytes;
#pragma unroll
      for (int r = 0; r < 2; ++r) raw[b4][r] = Traits::mma_fetch(wr[r] + off, q4, t);
    }
#pragma unroll
    for (int b4 = 0; b4 < 4; ++b4) {
      const int b = grp * 4 + b4;
      if (b >= n_blocks) break;
      const size_t off = static_cast<size_t>(b) * Traits::kBlockBytes;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int c = q4 + 4 * s;
        const typename Traits::MmaScale sc[2] = {Traits::mma_scale(raw[b4][0], wr[0] + off, q4, s),
                                                 Traits::mma_scale(raw[b4][1], wr[1] + off, q4, s)};
        const MmaQuants wq[2] = {Traits::mma_quants(raw[b4][0], q4, s),
                                 Traits::mma_quants(raw[b4][1], q4, s)};
#pragma unroll
        for (int k = 0; k < kTiles; ++k) {
          if (k == 1 && !second_tile) break;
          const int8_t* x = xb[k] + b * Traits::kBlockElems + Traits::mma_act(c);
          const auto blo = *reinterpret_cast<const uint32_t*>(x);
          const auto bhi = *reinterpret_cast<const uint32_t*>(x + Traits::kMmaHi);
          int lo[4] = {}, hi[4] = {}, sx_lo[4] = {}, sx_hi[4] = {};
          mma_s8_16816(lo, wq[0].lo, wq[1].lo, blo);
          mma_s8_16816(hi, wq[0].hi, wq[1].hi, bhi);
          if constexpr (Traits::kMmaSums) {
            mma_s8_16816(sx_lo, kOnes, kOnes, blo);
            mma_s8_16816(sx_hi, kOnes, kOnes, bhi);
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            sum[2 * b4 + s][k][e] +=
                Traits::mma_value(sc[e / 2], xd[k][e % 2][b], lo[e], hi[e], sx_lo[e], sx_hi[e]);
          }
        }
      }
    }
  }
  // warp_sum's levels xor 16, 8, 4 are partials j ^ 4, j ^ 2, j ^ 1 of one warp.
#pragma unroll
  for (int k = 0; k < kTiles; ++k) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float p[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) p[j] = sum[j][k][e];
      s_tree[warp][k * 4 + e][lane] =
          ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
    }
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int k = 0; k < kTiles; ++k) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int o = k * 4 + e;
        float v = 0;
#pragma unroll
        for (int p = 0; p < kSplit; ++p) {  // levels xor 2 and 1: warps q4 ^ 2, then q4 ^ 1
          const int w0 = 4 * p;
          const float r = (s_tree[w0][o][lane] + s_tree[w0 + 2][o][lane]) +
                          (s_tree[w0 + 1][o][lane] + s_tree[w0 + 3][o][lane]);
          v = p == 0 ? r : v + r;
        }
        const int row = row0 + g + 8 * (e / 2), tk = 8 * k + 2 * t + e % 2;
        if (row < n_rows && tk < tok.n_tok) {
          y[static_cast<int64_t>(tok.out_row(tk)) * n_rows + row] = v;
        }
      }
    }
  }
  __syncthreads();
}

// n_tok (2..8 * kTiles) activation rows q_stride / d_stride apart into y rows n_rows apart.
// The weights are never written by an earlier kernel, so the first L2 requests go out
// before grid_dep_wait and overlap the previous kernel's tail.
template <class Traits, int kSplit, int kTiles>
__global__ void __launch_bounds__(4 * kSplit * 32)
    matvec_mma_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int n_blocks, ActQ8 act,
                      float* __restrict__ y, int n_rows, int n_tok, int64_t q_stride,
                      int64_t d_stride, int ahead) {
  __shared__ MmaTree<kSplit, kTiles> s_tree;
  prefetch_first<Traits, kSplit>(w, row_bytes, n_rows, n_blocks, ahead);
  grid_dep_wait();
  grid_dep_launch();
  mma_rows<Traits, kSplit, kTiles, false>(w, row_bytes, n_blocks, act, y, n_rows,
                                          MmaTokens<false>{n_tok, nullptr, 1, q_stride, d_stride},
                                          ahead, s_tree);
}

// Grouped products (MatvecGroup with ids) on the tensor cores: block (x, j, z) takes row
// tile x of the j-th expert in use (ascending id) of tensor z, and that expert's pairs in
// ascending order, 16 at a time, so each expert is read once for all its pairs. Every pair's
// result is the grouped single-token kernel's (one row per warp, the kSplit == 1 order) bit
// for bit. REQUIRES: n_pairs <= kMmaGroupMaxPairs, ids < kMmaGroupMaxExperts.
constexpr int kMmaGroupMaxPairs = 256, kMmaGroupMaxExperts = 1024;
template <class Traits>
__global__ void __launch_bounds__(128)
    matvec_mma_grouped_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int n_blocks,
                              ActQ8 act, float* __restrict__ y, int n_rows, MatvecGroup group,
                              int ahead) {
  __shared__ MmaTree<1, 2> s_tree;
  __shared__ uint32_t s_used[kMmaGroupMaxExperts / 32];
  __shared__ int s_pairs[kMmaGroupMaxPairs];
  __shared__ int s_expert, s_count;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  grid_dep_wait();  // the ids come from the routing kernels
  grid_dep_launch();
  if (threadIdx.x < kMmaGroupMaxExperts / 32) s_used[threadIdx.x] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < group.n_pairs; i += blockDim.x) {
    const int e = group.ids[i];
    atomicOr(&s_used[e / 32], 1u << (e % 32));
  }
  __syncthreads();
  if (warp == 0) {
    // The j-th set bit of s_used: lane l's word holds bits 32l..32l+31.
    const int j = blockIdx.y;
    const uint32_t word = s_used[lane];
    const int n = __popc(word);
    int before = n;  // inclusive prefix sum of the counts, then exclusive
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, before, o);
      if (lane >= o) before += v;
    }
    before -= n;
    const int expert = j >= before && j < before + n
                           ? 32 * lane + static_cast<int>(__fns(word, 0u, j - before + 1))
                           : -1;
    const unsigned owner = __ballot_sync(0xffffffffu, expert >= 0);
    const int e = owner != 0 ? __shfl_sync(0xffffffffu, expert, __ffs(owner) - 1) : -1;
    // Its pairs in ascending order.
    int count = 0;
    for (int base = 0; base < group.n_pairs && e >= 0; base += 32) {
      const int i = base + lane;
      const unsigned hit = __ballot_sync(0xffffffffu, i < group.n_pairs && group.ids[i] == e);
      if ((hit >> lane) & 1u) s_pairs[count + __popc(hit & ((1u << lane) - 1))] = i;
      count += __popc(hit);
    }
    if (lane == 0) {
      s_expert = e;
      s_count = count;
    }
  }
  __syncthreads();
  const int expert = s_expert, count = s_count;
  if (expert < 0) return;  // fewer experts in use than blocks
  if (blockIdx.z == 1) {
    w = group.w_second;
    y = group.y_second;
  }
  w += static_cast<size_t>(expert) * group.expert_bytes;
  prefetch_first<Traits, 1>(w, row_bytes, n_rows, n_blocks, ahead);
  for (int first = 0; first < count; first += 16) {
    const MmaTokens<true> tok{min(16, count - first), s_pairs + first, group.act_div,
                              group.q_stride, group.d_stride};
    mma_rows<Traits, 1, 2, true>(w, row_bytes, n_blocks, act, y, n_rows, tok, ahead, s_tree);
  }
}

template <class Traits, int kSplit, int kTiles>
void launch_matvec_mma_tiles(const MatvecArgs& a) {
  const unsigned grid = static_cast<unsigned>((a.n_rows + 15) / 16);
  launch_kernel(matvec_mma_kernel<Traits, kSplit, kTiles>, grid, 4 * kSplit * 32, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.row_bytes,
                static_cast<int>(a.n_cols / Traits::kBlockElems), a.act, a.y,
                static_cast<int>(a.n_rows), a.n_tok, a.q_stride, a.d_stride, g_matvec_mma_prefetch);
}

// Tiles of 8 tokens: one up to 8, two from 9.
template <class Traits, int kSplit>
void launch_matvec_mma(const MatvecArgs& a) {
  static_assert(kMatvecMaxTokens == 16);
  if (a.n_tok <= 8) {
    launch_matvec_mma_tiles<Traits, kSplit, 1>(a);
  } else {
    launch_matvec_mma_tiles<Traits, kSplit, 2>(a);
  }
}

// Whether a grouped product of a format with a tensor-core form runs there: at least
// g_matvec_mma_min_pairs pairs per expert in use (at most n_experts of them) on average.
inline bool grouped_on_tensor_cores(const MatvecGroup& gr) {
  const int slots = std::min(gr.n_pairs, gr.n_experts);
  return gr.n_pairs <= kMmaGroupMaxPairs && gr.n_experts <= kMmaGroupMaxExperts && slots > 0 &&
         gr.n_pairs >= g_matvec_mma_min_pairs * slots;
}

template <class Traits>
void launch_matvec_mma_grouped(const MatvecArgs& a) {
  const MatvecGroup& gr = *a.group;
  const dim3 grid(static_cast<unsigned>((a.n_rows + 15) / 16),
                  static_cast<unsigned>(std::min(gr.n_pairs, gr.n_experts)),
                  gr.w_second != nullptr ? 2u : 1u);
  launch_kernel(matvec_mma_grouped_kernel<Traits>, grid, 128, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.row_bytes,
                static_cast<int>(a.n_cols / Traits::kBlockElems), a.act, a.y,
                static_cast<int>(a.n_rows), gr, g_matvec_mma_prefetch);
}

template <class Traits, int kTok, int kSplit>
void launch_matvec_tokens(const MatvecArgs& a) {
  const int64_t rows_per_block = kMatvecWarps / kSplit;
  const unsigned grid = static_cast<unsigned>((a.n_rows + rows_per_block - 1) / rows_per_block);
  launch_kernel(matvec_batched_kernel<Traits, kTok, kSplit>, grid, kMatvecWarps * 32, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.row_bytes,
                static_cast<int>(a.n_cols / Traits::kBlockElems), a.act, a.y,
                static_cast<int>(a.n_rows), a.n_tok, a.q_stride, a.d_stride);
}

// The smallest instantiation that holds the batch (the tokens' sums live in registers),
// split over two warps where the single-token product of this shape is.
template <class Traits, int kSplit>
void launch_matvec_batched(const MatvecArgs& a) {
  static_assert(kMatvecMaxTokens == 16);
  if (a.n_tok <= 2) {
    launch_matvec_tokens<Traits, 2, kSplit>(a);
  } else if (a.n_tok <= 4) {
    launch_matvec_tokens<Traits, 4, kSplit>(a);
  } else if (a.n_tok <= 8) {
    launch_matvec_tokens<Traits, 8, kSplit>(a);
  } else {
    launch_matvec_tokens<Traits, 16, kSplit>(a);
  }
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

// The single-token configuration of a shape: 0 one row per warp, 1 two rows per warp, 2
// each row split over two warps (the policy above, or g_matvec_config_override).
template <class Traits>
int matvec_config(const MatvecArgs& a) {
  const int64_t items_per_lane = a.n_cols / Traits::kBlockElems * Traits::kChunks / 32;
  constexpr bool kFloat = Traits::kBlockElems < 32;  // F32 / F16 / BF16
  int config = 0;
  if (a.n_rows >= kMatvecOutputRows) {
    config = 1;
  } else if (a.n_rows >= kMatvecTallRows) {
    config = items_per_lane < 8 ? 1 : 2;
  } else if (a.n_rows <= kMatvecShortRows && items_per_lane >= 8 && !kFloat) {
    config = 2;
  } else if (kFloat && a.n_rows <= kMatvecSplitFloatRows && items_per_lane >= 8) {
    config = 2;
  }
  if (g_matvec_config_override >= 0) config = g_matvec_config_override;
  if (a.add_to != nullptr && config == 1) config = 0;  // the residual needs one row per warp
  return config;
}

template <class Traits>
void launch_matvec(const MatvecArgs& a);

// Two single-token products of one shape on one input (a MatvecGroup without ids): one
// grouped launch (one ramp and tail for both), whose one-row-per-warp order is each
// product's own single-token and batched order unless the shape splits its rows over two
// warps; then a launch each.
template <class Traits>
void launch_matvec_pair(const MatvecArgs& a) {
  if (matvec_config<Traits>(a) != 2) {
    launch_matvec_grouped<Traits>(a);
    return;
  }
  MatvecArgs one = a;
  one.group = nullptr;
  launch_matvec<Traits>(one);
  one.w = a.group->w_second;
  one.y = a.group->y_second;
  launch_matvec<Traits>(one);
}

template <class Traits>
void launch_matvec(const MatvecArgs& a) {
  if (a.group != nullptr) {
    if (a.group->ids == nullptr) {
      launch_matvec_pair<Traits>(a);
      return;
    }
    if constexpr (kHasMma<Traits>) {
      if (grouped_on_tensor_cores(*a.group)) {
        launch_matvec_mma_grouped<Traits>(a);
        return;
      }
    }
    launch_matvec_grouped<Traits>(a);
    return;
  }
  const int config = matvec_config<Traits>(a);
  if (a.n_tok > 1) {  // the single-token order: split where it splits
    if constexpr (kHasMma<Traits>) {
      if (a.n_tok >= g_matvec_mma_min_tokens) {
        if (config == 2) {
          launch_matvec_mma<Traits, 2>(a);
        } else {
          launch_matvec_mma<Traits, 1>(a);
        }
        return;
      }
    }
    if (config == 2) {
      launch_matvec_batched<Traits, 2>(a);
    } else {
      launch_matvec_batched<Traits, 1>(a);
    }
    return;
  }
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
