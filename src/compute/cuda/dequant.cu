// Dequantizers: one thread per 8 consecutive elements of a row, decoded by the block
// formats of dequant_formats.cuh.
#include <cuda_fp16.h>

#include "compute/cuda/common.cuh"
#include "compute/cuda/dequant_formats.cuh"
#include "compute/cuda/dequant_launch.h"

namespace hypura::compute::cuda {
namespace {

using namespace formats;  // NOLINT: the block formats

template <class OutT>
__device__ __forceinline__ void store(OutT* out, float v) {
  if constexpr (sizeof(OutT) == 2) {
    *reinterpret_cast<uint16_t*>(out) = __half_as_ushort(__float2half_rn(v));
  } else {
    *out = v;
  }
}

// Rows of a quantized matrix; thread g takes elements 8 (g % groups) .. + 7 of output row
// g / groups (source row ids[r], or row0 + r).
// Index is the type of the group index: 32-bit division where the groups fit (a 64-bit
// division costs more than the thread's bytes).
template <class F, class OutT, class Index>
__global__ void dequant_kernel(const uint8_t* __restrict__ w, size_t row_bytes,
                               const int32_t* __restrict__ ids, int64_t row0, int n_cols,
                               int64_t n_groups, OutT* __restrict__ out) {
  grid_dep_wait();
  grid_dep_launch();
  const Index g = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  const Index groups = static_cast<Index>(n_cols / 8);
  if (static_cast<int64_t>(g) >= n_groups) return;
  const auto r = static_cast<int64_t>(g / groups);
  const int e0 = static_cast<int>(g % groups) * 8;
  const int64_t src = ids != nullptr ? ids[r] : row0 + r;
  const uint8_t* block = w + static_cast<size_t>(src) * row_bytes +
                         static_cast<size_t>(e0 / F::kBlockElems) * F::kBlockBytes;
  float v[8];
  F::dequant8(block, e0 % F::kBlockElems, v);
  OutT* o = out + r * n_cols + e0;
  if constexpr (sizeof(OutT) == 2) {
    uint32_t packed[4];
    for (int k = 0; k < 4; ++k) {
      const __half2 h = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
      packed[k] = *reinterpret_cast<const uint32_t*>(&h);
    }
    *reinterpret_cast<uint4*>(o) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  } else {
    reinterpret_cast<float4*>(o)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(o)[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

// F32 / F16 / BF16 sources, one element per thread (any n_cols).
template <int kFmt, class OutT>  // 0: F32, 1: F16, 2: BF16
__global__ void widen_kernel(const uint8_t* __restrict__ w, size_t row_bytes,
                             const int32_t* __restrict__ ids, int64_t row0, int n_cols, int64_t n,
                             OutT* __restrict__ out) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / n_cols;
  const int c = static_cast<int>(i % n_cols);
  const int64_t src = ids != nullptr ? ids[r] : row0 + r;
  const uint8_t* row = w + static_cast<size_t>(src) * row_bytes;
  float v;
  if constexpr (kFmt == 0) {
    v = reinterpret_cast<const float*>(row)[c];
  } else if constexpr (kFmt == 1) {
    v = half_bits_to_float(reinterpret_cast<const uint16_t*>(row)[c]);
  } else {
    v = bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[c]);
  }
  store<OutT>(out + i, v);
}

template <class F, class OutT>
void launch_quant(const DequantArgs& a, OutT* out) {
  const int64_t n_groups = a.n_rows * (a.n_cols / 8);
  if (n_groups == 0) return;
  const auto blocks = static_cast<unsigned>((n_groups + 255) / 256);
  const auto* w = static_cast<const uint8_t*>(a.w);
  const int n_cols = static_cast<int>(a.n_cols);
  if (n_groups + 256 < (int64_t{1} << 32)) {
    launch_kernel(dequant_kernel<F, OutT, uint32_t>, blocks, 256, 0, a.stream, w, a.row_bytes,
                  a.ids, a.row0, n_cols, n_groups, out);
  } else {
    launch_kernel(dequant_kernel<F, OutT, uint64_t>, blocks, 256, 0, a.stream, w, a.row_bytes,
                  a.ids, a.row0, n_cols, n_groups, out);
  }
}

template <int kFmt, class OutT>
void launch_widen(const DequantArgs& a, OutT* out) {
  const int64_t n = a.n_rows * a.n_cols;
  if (n == 0) return;
  launch_kernel(widen_kernel<kFmt, OutT>, static_cast<unsigned>((n + 255) / 256), 256, 0, a.stream,
                static_cast<const uint8_t*>(a.w), a.row_bytes, a.ids, a.row0,
                static_cast<int>(a.n_cols), n, out);
}

// GGUF type ids (gguf::GgmlType).
template <class OutT>
bool dequantize(uint32_t type_id, const DequantArgs& a, OutT* out) {
  switch (type_id) {
    case 0:
      launch_widen<0>(a, out);
      return true;  // F32
    case 1:
      launch_widen<1>(a, out);
      return true;  // F16
    case 30:
      launch_widen<2>(a, out);
      return true;  // BF16
    default:
      return visit_block_format(type_id, [&](auto f) { launch_quant<decltype(f)>(a, out); });
  }
}

__global__ void f32_to_f16_kernel(const float* __restrict__ x, int64_t n,
                                  __half* __restrict__ out) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(x[i]);
}

}  // namespace

bool launch_dequant(uint32_t type_id, const DequantArgs& a) {
  if (a.f16) return dequantize(type_id, a, static_cast<__half*>(a.out));
  return dequantize(type_id, a, static_cast<float*>(a.out));
}

void launch_f32_to_f16(const float* x, int64_t n, uint16_t* out, StreamHandle stream) {
  if (n == 0) return;
  launch_kernel(f32_to_f16_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, x, n,
                reinterpret_cast<__half*>(out));
}

}  // namespace hypura::compute::cuda
