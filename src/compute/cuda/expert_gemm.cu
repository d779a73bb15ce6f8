// A prompt's MoE products: block (x, y) computes weight rows 64 x .. 64 x + 63 of tile y's
// expert against the tile's activation rows. Four warps, each 32 rows x 32 activation rows
// of m16n8k16 F16 products accumulated in F32. The K loop runs 64 columns a step through two
// shared buffers: a step's weights are dequantized and its activations loaded into registers
// while the tensor cores take the previous step, so one barrier a step suffices.
#include <cuda_fp16.h>

#include "compute/cuda/common.cuh"
#include "compute/cuda/dequant_formats.cuh"
#include "compute/cuda/expert_gemm.h"

namespace hypura::compute::cuda {
namespace {

using namespace formats;  // NOLINT: the block formats

constexpr int kBM = 64;               // weight rows of a block
constexpr int kBN = kExpertTileRows;  // activation rows of a block
constexpr int kBK = 64;               // columns of a step
constexpr int kThreads = 128;
constexpr int kStride = kBK + 8;  // halves a shared row: 8 rows of 4 lanes hit 32 banks
constexpr int kLoads = kBM * kBK / 8 / kThreads;  // 8-value groups a thread loads a step
static_assert(kBM == kBN, "one group index serves the weight and the activation rows");

// F16 and BF16 rows as 8-value "blocks", so one kernel serves them and the block formats.
template <bool kBf16>
struct DqFloat16 {
  static constexpr int kBlockBytes = 16, kBlockElems = 8;
  static __device__ void dequant8(const uint8_t* b, int, float (&v)[8]) {
    const uint4 raw = *reinterpret_cast<const uint4*>(b);
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    for (int k = 0; k < 8; ++k) {
      const auto h = static_cast<uint16_t>(words[k / 2] >> (16 * (k % 2)));
      v[k] = kBf16 ? bf16_bits_to_float(h) : half_bits_to_float(h);
    }
  }
};

__device__ __forceinline__ uint4 to_half8(const float (&v)[8]) {
  return make_uint4(pack_half2(v[0], v[1]), pack_half2(v[2], v[3]), pack_half2(v[4], v[5]),
                    pack_half2(v[6], v[7]));
}

__device__ __forceinline__ uint32_t lds32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

template <class F>
__global__ void __launch_bounds__(kThreads)
    expert_gemm_kernel(const uint8_t* __restrict__ w, size_t expert_bytes, size_t row_bytes,
                       int n_rows, int n_cols, const uint16_t* __restrict__ x,
                       float* __restrict__ y, const ExpertTiles tiles) {
  __shared__ __align__(16) uint16_t sw[2][kBM * kStride];
  __shared__ __align__(16) uint16_t sx[2][kBN * kStride];
  grid_dep_wait();
  grid_dep_launch();
  const int first = tiles.first[blockIdx.y], count = tiles.rows[blockIdx.y];
  const uint8_t* expert = w + expert_bytes * tiles.expert[blockIdx.y];
  const int row0 = static_cast<int>(blockIdx.x) * kBM;
  const int tid = static_cast<int>(threadIdx.x);

  // Group g = tid + i * kThreads: row g / 8 of the tile, columns k0 + 8 (g % 8) .. + 7.
  uint4 rw[kLoads], rx[kLoads];
  const auto load = [&](int k0) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int g = tid + i * kThreads, r = g / 8, c = k0 + (g % 8) * 8;
      rw[i] = rx[i] = make_uint4(0, 0, 0, 0);
      if (c >= n_cols) continue;
      if (row0 + r < n_rows) {
        float v[8];
        F::dequant8(expert + static_cast<size_t>(row0 + r) * row_bytes +
                        static_cast<size_t>(c / F::kBlockElems) * F::kBlockBytes,
                    c % F::kBlockElems, v);
        rw[i] = to_half8(v);
      }
      if (r < count)
        rx[i] = *reinterpret_cast<const uint4*>(x + static_cast<size_t>(first + r) * n_cols + c);
    }
  };
  const auto store = [&](int buf) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int g = tid + i * kThreads, at = (g / 8) * kStride + (g % 8) * 8;
      *reinterpret_cast<uint4*>(&sw[buf][at]) = rw[i];
      *reinterpret_cast<uint4*>(&sx[buf][at]) = rx[i];
    }
  };

  const int warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's rows and activation rows
  float acc[2][4][4] = {};
  load(0);
  int buf = 0;
  for (int k0 = 0; k0 < n_cols; k0 += kBK, buf ^= 1) {
    store(buf);
    __syncthreads();
    if (k0 + kBK < n_cols) load(k0 + kBK);
    const uint16_t* sa = sw[buf];
    const uint16_t* sb = sx[buf];
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t a[2][4], b[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const uint16_t* p = sa + (wm + mi * 16 + gid) * kStride + kk + tig * 2;
        a[mi][0] = lds32(p);
        a[mi][1] = lds32(p + 8 * kStride);
        a[mi][2] = lds32(p + 8);
        a[mi][3] = lds32(p + 8 * kStride + 8);
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const uint16_t* p = sb + (wn + ni * 8 + gid) * kStride + kk + tig * 2;
        b[ni][0] = lds32(p);
        b[ni][1] = lds32(p + 8);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
      }
    }
  }
  // Accumulator (mi, ni): c0, c1 at weight row gid, activation rows 2 tig, 2 tig + 1; c2, c3
  // at weight row gid + 8.
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = row0 + wm + mi * 16 + gid + (j / 2) * 8, t = wn + ni * 8 + tig * 2 + j % 2;
        if (r < n_rows && t < count)
          y[static_cast<size_t>(first + t) * n_rows + r] = acc[mi][ni][j];
      }
    }
  }
}

template <class F>
void launch(const ExpertGemmArgs& a, const ExpertTiles& tiles) {
  const dim3 grid(static_cast<unsigned>((a.n_rows + kBM - 1) / kBM),
                  static_cast<unsigned>(tiles.count));
  launch_kernel(expert_gemm_kernel<F>, grid, kThreads, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.expert_bytes, a.row_bytes,
                static_cast<int>(a.n_rows), static_cast<int>(a.n_cols), a.x, a.y, tiles);
}

// GGUF type ids (gguf::GgmlType) of the float formats.
constexpr uint32_t kF16 = 1, kBF16 = 30;

}  // namespace

bool expert_gemm_supported(uint32_t type_id, int64_t n_cols) {
  if (n_cols % 8 != 0) return false;
  return type_id == kF16 || type_id == kBF16 || visit_block_format(type_id, [](auto) {});
}

void launch_expert_gemm(uint32_t type_id, const ExpertGemmArgs& a, const ExpertTiles& tiles) {
  if (type_id == kF16) {
    launch<DqFloat16<false>>(a, tiles);
  } else if (type_id == kBF16) {
    launch<DqFloat16<true>>(a, tiles);
  } else {
    visit_block_format(type_id, [&](auto f) { launch<decltype(f)>(a, tiles); });
  }
}

}  // namespace hypura::compute::cuda
