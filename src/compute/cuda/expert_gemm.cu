// A prompt's MoE products: block (x, y) computes weight rows 64 x .. 64 x + 63 of tile y's
// expert against the tile's activation rows. Four warps, each 32 rows x 32 activation rows
// of m16n8k16 F16 products accumulated in F32. The K loop runs 64 columns a step through two
// shared buffers. A step's loads (the weights' raw block fields, the activations) are issued
// before the tensor cores take the previous step and decoded after, so their latency hides
// behind the products; one barrier a step suffices.
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
  using Raw = uint4;
  static __device__ Raw fetch(const uint8_t* b, int) { return *reinterpret_cast<const uint4*>(b); }
  static __device__ void decode(const Raw& raw, int, float (&v)[8]) {
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

// Accumulator (mi, ni) of a warp whose tile starts at weight row r0 and activation row t0:
// c0, c1 at weight row gid, activation rows 2 tig, 2 tig + 1; c2, c3 at weight row gid + 8.
__device__ __forceinline__ void store_tile(const float (&acc)[2][4][4], float* y, int n_rows,
                                           int r0, int first, int t0, int count, int gid, int tig) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = r0 + mi * 16 + gid + (j / 2) * 8, t = t0 + ni * 8 + tig * 2 + j % 2;
        if (r < n_rows && t < count)
          y[static_cast<size_t>(first + t) * n_rows + r] = acc[mi][ni][j];
      }
    }
  }
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

  // Group g = tid + i * kThreads: row g / 8 of the tile, columns k0 + 8 (g % 8) .. + 7. Rows
  // past the matrix or the tile read the last one (their results are not stored), columns
  // past n_cols the last 8 and store zeros, so the loads need no branches.
  using S = Staged<F>;
  typename S::Raw rw[kLoads];
  uint4 rx[kLoads];
  const auto fetch = [&](int k0) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int g = tid + i * kThreads, r = g / 8, c = min(k0 + (g % 8) * 8, n_cols - 8);
      rw[i] = S::fetch(expert + static_cast<size_t>(min(row0 + r, n_rows - 1)) * row_bytes +
                           static_cast<size_t>(c / F::kBlockElems) * F::kBlockBytes,
                       c % F::kBlockElems);
      rx[i] = *reinterpret_cast<const uint4*>(
          x + static_cast<size_t>(first + min(r, count - 1)) * n_cols + c);
    }
  };
  const auto decode_store = [&](int k0, int buf) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int g = tid + i * kThreads, c = k0 + (g % 8) * 8, at = (g / 8) * kStride + (g % 8) * 8;
      const bool inside = c < n_cols;
      float v[8];
      S::decode(rw[i], min(c, n_cols - 8) % F::kBlockElems, v);
      const uint4 zero = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(&sw[buf][at]) = inside ? to_half8(v) : zero;
      *reinterpret_cast<uint4*>(&sx[buf][at]) = inside ? rx[i] : zero;
    }
  };

  const int warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's rows and activation rows
  float acc[2][4][4] = {};
  // Fragments ni of this warp past the tile's rows hold zeros: skip their products.
  const int n_frags = min(4, max(0, (count - wn + 7) / 8));
  fetch(0);
  int buf = 0;
  for (int k0 = 0; k0 < n_cols; k0 += kBK, buf ^= 1) {
    decode_store(k0, buf);
    __syncthreads();
    if (k0 + kBK < n_cols) fetch(k0 + kBK);
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
        for (int ni = 0; ni < 4; ++ni) {
          if (ni < n_frags) mma_16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        }
      }
    }
  }
  store_tile(acc, y, n_rows, row0 + wm, first, wn, count, gid, tig);
}

template <class F>
void launch(const ExpertGemmArgs& a, const ExpertTiles& tiles) {
  const dim3 grid(static_cast<unsigned>((a.n_rows + kBM - 1) / kBM),
                  static_cast<unsigned>(tiles.count));
  launch_kernel(expert_gemm_kernel<F>, grid, kThreads, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.expert_bytes, a.row_bytes,
                static_cast<int>(a.n_rows), static_cast<int>(a.n_cols), a.x, a.y, tiles);
}

// ---- The signed 32-element formats against 8-bit activations ----
//
// MXFP4, Q8_0 and Q4_0 weights are int8 quants times one scale a 32-column block, and so
// are the activations (the CPU's Q8_0 rounding, act_q8.h), so a block's product is an
// exact integer dot product (m16n8k32 int8 tensor-core products, twice the F16 rate) scaled
// once: y += float(dot) * (d_w * d_x), as the CPU sums a block. Each format: fetch(b) loads
// a block's fields (Raw), decode(raw, q, d) gives its 32 quants as 8 words and its scale.

// The 4 kWords bytes at p (any alignment) as the aligned words that hold them and a shift.
template <int kWords>
struct Unaligned {
  uint32_t w[kWords + 1], shift;
  __device__ void load(const uint8_t* p) {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    const auto* a = reinterpret_cast<const uint32_t*>(addr & ~uintptr_t{3});
    shift = static_cast<uint32_t>(addr & 3) * 8;
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = a[i];
    w[kWords] = shift != 0 ? a[kWords] : 0u;  // no word past the bytes where aligned
  }
  __device__ uint32_t word(int i) const {
    return __funnelshift_r(w[i], w[i + 1], shift);
  }
};

struct I8MXFP4 {
  static constexpr int kBlockBytes = 17;
  struct Raw {
    Unaligned<4> codes;
    uint32_t e;
  };
  static __device__ Raw fetch(const uint8_t* b) {
    Raw r;
    r.codes.load(b + 1);
    r.e = b[0];
    return r;
  }
  // Elements 0..15 are the codes' low nibbles, 16..31 their high ones (doubled E2M1 values,
  // so the scale is halved: e8m0_half_to_float).
  static __device__ void decode(const Raw& r, uint32_t (&q)[8], float& d) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t c = r.codes.word(i);
      q[i] = static_cast<uint32_t>(mxfp4_values4(c & 0x0F0F0F0Fu));
      q[i + 4] = static_cast<uint32_t>(mxfp4_values4((c >> 4) & 0x0F0F0F0Fu));
    }
    d = e8m0_half_to_float(r.e);
  }
};
// Q8_0 (kNibbles = false: 32 quant bytes) and Q4_0 (16 bytes of nibbles, less 8) after an
// fp16 scale.
template <bool kNibbles>
struct I8Legacy {
  static constexpr int kBlockBytes = kNibbles ? 18 : 34;
  struct Raw {
    Unaligned<kNibbles ? 4 : 8> quants;
    uint32_t d;
  };
  static __device__ Raw fetch(const uint8_t* b) {
    Raw r;
    r.quants.load(b + 2);
    r.d = load_u16(b);
    return r;
  }
  static __device__ void decode(const Raw& r, uint32_t (&q)[8], float& d) {
#pragma unroll
    for (int i = 0; i < (kNibbles ? 4 : 8); ++i) {
      const uint32_t c = r.quants.word(i);
      if constexpr (kNibbles) {
        q[i] = __vsub4(c & 0x0F0F0F0Fu, 0x08080808u);
        q[i + 4] = __vsub4((c >> 4) & 0x0F0F0F0Fu, 0x08080808u);
      } else {
        q[i] = c;
      }
    }
    d = half_bits_to_float(static_cast<uint16_t>(r.d));
  }
};

constexpr int kQStride = kBK + 16;  // bytes a shared row: 8 rows of 4 lanes hit 32 banks
constexpr int kStepBlocks = kBK / 32;

// As expert_gemm_kernel, 64 columns (two blocks) a step: thread t fetches block t % 2 of
// weight row t / 2, 32 bytes of activations and one activation scale, and decodes them a
// step later.
template <class F>
__global__ void __launch_bounds__(kThreads)
    expert_gemm_q8_kernel(const uint8_t* __restrict__ w, size_t expert_bytes, size_t row_bytes,
                          int n_rows, int n_cols, const int8_t* __restrict__ xq,
                          const float* __restrict__ xd, float* __restrict__ y,
                          const ExpertTiles tiles) {
  static_assert(kBM * kStepBlocks == kThreads && kBN * kBK / 16 == 2 * kThreads);
  __shared__ __align__(16) uint8_t sw[2][kBM * kQStride];
  __shared__ __align__(16) uint8_t sx[2][kBN * kQStride];
  __shared__ float swd[2][kBM * kStepBlocks], sxd[2][kBN * kStepBlocks];
  grid_dep_wait();
  grid_dep_launch();
  const int first = tiles.first[blockIdx.y], count = tiles.rows[blockIdx.y];
  const uint8_t* expert = w + expert_bytes * tiles.expert[blockIdx.y];
  const int row0 = static_cast<int>(blockIdx.x) * kBM;
  const int tid = static_cast<int>(threadIdx.x), nb = n_cols / 32;
  const int my_row = tid / kStepBlocks, my_block = tid % kStepBlocks;

  // Blocks past the row's last are fetched as its last and stored as zeros; rows past the
  // matrix or the tile as the last one (their results are not stored).
  typename F::Raw rw;
  uint4 rx[2];
  float rxd;
  const auto fetch = [&](int b0) {
    const int blk = min(b0 + my_block, nb - 1);
    rw = F::fetch(expert + static_cast<size_t>(min(row0 + my_row, n_rows - 1)) * row_bytes +
                  static_cast<size_t>(blk) * F::kBlockBytes);
    const size_t xrow = static_cast<size_t>(first + min(my_row, count - 1));
    rxd = xd[xrow * nb + blk];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + i * kThreads, r = c / 4, col = min(b0 * 32 + (c % 4) * 16, n_cols - 16);
      rx[i] = *reinterpret_cast<const uint4*>(
          xq + static_cast<size_t>(first + min(r, count - 1)) * n_cols + col);
    }
  };
  const auto decode_store = [&](int b0, int buf) {
    const bool inside = b0 + my_block < nb;
    uint32_t q[8];
    float d;
    F::decode(rw, q, d);
    uint8_t* dst = &sw[buf][my_row * kQStride + my_block * 32];
    const uint4 zero = make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(dst) = inside ? make_uint4(q[0], q[1], q[2], q[3]) : zero;
    *reinterpret_cast<uint4*>(dst + 16) = inside ? make_uint4(q[4], q[5], q[6], q[7]) : zero;
    swd[buf][my_row * kStepBlocks + my_block] = inside ? d : 0.0f;
    sxd[buf][my_row * kStepBlocks + my_block] = inside ? rxd : 0.0f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + i * kThreads, r = c / 4, col16 = c % 4;
      *reinterpret_cast<uint4*>(&sx[buf][r * kQStride + col16 * 16]) =
          b0 * 32 + col16 * 16 < n_cols ? rx[i] : zero;
    }
  };

  const int warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  float acc[2][4][4] = {};
  const int n_frags = min(4, max(0, (count - wn + 7) / 8));
  fetch(0);
  int buf = 0;
  for (int b0 = 0; b0 < nb; b0 += kStepBlocks, buf ^= 1) {
    decode_store(b0, buf);
    __syncthreads();
    if (b0 + kStepBlocks < nb) fetch(b0 + kStepBlocks);
#pragma unroll
    for (int kb = 0; kb < kStepBlocks; ++kb) {
      uint32_t b[4][2];
      float dx[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int t = wn + ni * 8;
        const uint8_t* p = &sx[buf][(t + gid) * kQStride + kb * 32 + tig * 4];
        b[ni][0] = *reinterpret_cast<const uint32_t*>(p);
        b[ni][1] = *reinterpret_cast<const uint32_t*>(p + 16);
        dx[ni][0] = sxd[buf][(t + tig * 2) * kStepBlocks + kb];
        dx[ni][1] = sxd[buf][(t + tig * 2 + 1) * kStepBlocks + kb];
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int r = wm + mi * 16 + gid;
        const uint8_t* p = &sw[buf][r * kQStride + kb * 32 + tig * 4];
        const uint32_t a[4] = {*reinterpret_cast<const uint32_t*>(p),
                               *reinterpret_cast<const uint32_t*>(p + 8 * kQStride),
                               *reinterpret_cast<const uint32_t*>(p + 16),
                               *reinterpret_cast<const uint32_t*>(p + 8 * kQStride + 16)};
        const float dw[2] = {swd[buf][r * kStepBlocks + kb], swd[buf][(r + 8) * kStepBlocks + kb]};
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          if (ni >= n_frags) continue;
          int c[4] = {0, 0, 0, 0};
          mma_s8_16832(c, a, b[ni][0], b[ni][1]);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc[mi][ni][j] =
                fmaf(static_cast<float>(c[j]), dw[j / 2] * dx[ni][j % 2], acc[mi][ni][j]);
          }
        }
      }
    }
  }
  store_tile(acc, y, n_rows, row0 + wm, first, wn, count, gid, tig);
}

// fn(F{}) for the formats of expert_gemm_q8_kernel; false for the others.
template <class Fn>
bool visit_q8_format(uint32_t type_id, Fn&& fn) {
  switch (type_id) {
    case 2:
      fn(I8Legacy<true>{});
      return true;
    case 8:
      fn(I8Legacy<false>{});
      return true;
    case 39:
      fn(I8MXFP4{});
      return true;
    default:
      return false;
  }
}

template <class F>
void launch_q8(const ExpertGemmArgs& a, const ExpertTiles& tiles) {
  const dim3 grid(static_cast<unsigned>((a.n_rows + kBM - 1) / kBM),
                  static_cast<unsigned>(tiles.count));
  launch_kernel(expert_gemm_q8_kernel<F>, grid, kThreads, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.expert_bytes, a.row_bytes,
                static_cast<int>(a.n_rows), static_cast<int>(a.n_cols), a.xq, a.xd, a.y, tiles);
}

// GGUF type ids (gguf::GgmlType) of the float formats.
constexpr uint32_t kF16 = 1, kBF16 = 30;

}  // namespace

bool expert_gemm_supported(uint32_t type_id, int64_t n_cols) {
  if (n_cols % 8 != 0) return false;
  return type_id == kF16 || type_id == kBF16 || visit_block_format(type_id, [](auto) {});
}

bool expert_gemm_takes_q8(uint32_t type_id, int64_t n_cols) {
  return n_cols % 32 == 0 && visit_q8_format(type_id, [](auto) {});
}

void launch_expert_gemm(uint32_t type_id, const ExpertGemmArgs& a, const ExpertTiles& tiles) {
  if (a.xq != nullptr) {
    visit_q8_format(type_id, [&](auto f) { launch_q8<decltype(f)>(a, tiles); });
  } else if (type_id == kF16) {
    launch<DqFloat16<false>>(a, tiles);
  } else if (type_id == kBF16) {
    launch<DqFloat16<true>>(a, tiles);
  } else {
    visit_block_format(type_id, [&](auto f) { launch<decltype(f)>(a, tiles); });
  }
}

}  // namespace hypura::compute::cuda
