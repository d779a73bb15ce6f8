#include "compute/cuda/fused.h"
#include "compute/cuda/norm_impl.cuh"
#include "compute/cuda/quantize_impl.cuh"
#include "compute/cuda/unary_impl.cuh"

namespace hypura::compute::cuda {
namespace {

// Thread t of a 256-thread block holds value v of element `base + t` of the flat
// activations: its quantization in `format` (Q8_K: the block is one super-block; Q8_0 /
// Q8_1: warp w quantizes elements base + 32 w ..).
template <ActFormat kFormat>
__device__ __forceinline__ void quantize_256(float v, int64_t base, int8_t* q, float* d, float* s,
                                             Q8kScratch& sh) {
  if constexpr (kFormat == ActFormat::kQ8_K) {
    q8k_block(v, q + base, d + base / 256, sh);
  } else {
    const int64_t b = base / 32 + threadIdx.x / 32;
    q8_32_warp<kFormat == ActFormat::kQ8_1>(v, threadIdx.x % 32, q + b * 32, d + b, s + b);
  }
}

// One block of kNormThreads (256) per 256 values of a row (grid: rows x chunks, the last one
// partial for Q8_0 / Q8_1): each block computes its row's scale (the same operations in
// every block, so the same float) and normalizes and quantizes its chunk, a warp per
// 32-value block. A block per row was latency-bound (its chunks in turn).
template <ActFormat kFormat>
__global__ void __launch_bounds__(kNormThreads)
    norm_quantize_kernel(const float* __restrict__ x, const float* __restrict__ w, int n, float eps,
                         float* __restrict__ out, int8_t* q, float* d, float* s) {
  __shared__ double partial[kNormThreads / 32];
  __shared__ Q8kScratch sh;
  grid_dep_wait();
  grid_dep_launch();
  const int64_t row = blockIdx.x;
  const int c = blockIdx.y * kNormThreads;
  const float* xr = x + row * n;
  const float sc = row_rms_scale(xr, n, eps, partial);
  const int i = c + threadIdx.x;
  if (c + static_cast<int>(threadIdx.x / 32) * 32 >= n) return;  // a warp past the row
  const float v = normed(xr, w, i, sc);
  out[row * n + i] = v;
  quantize_256<kFormat>(v, row * n + c, q, d, s, sh);
}

// One block of 256 threads per 256 elements.
template <UnaryOp kOp, ActFormat kFormat>
__global__ void __launch_bounds__(256)
    glu_quantize_kernel(float* __restrict__ gate, const float* __restrict__ up, int8_t* q, float* d,
                        float* s) {
  __shared__ Q8kScratch sh;
  grid_dep_wait();
  grid_dep_launch();
  const int64_t base = static_cast<int64_t>(blockIdx.x) * 256, i = base + threadIdx.x;
  const float v = glu_one<kOp>(gate[i], up[i]);
  gate[i] = v;
  quantize_256<kFormat>(v, base, q, d, s, sh);
}

struct Out {
  int8_t* q;
  float* d;
  float* s;
};
Out carve(void* scratch, int64_t n) {
  const ActQ8Layout l = act_q8_layout(n);
  auto* base = static_cast<uint8_t*>(scratch);
  return {reinterpret_cast<int8_t*>(base + l.q), reinterpret_cast<float*>(base + l.d),
          reinterpret_cast<float*>(base + l.s)};
}

template <UnaryOp kOp>
void launch_glu(ActFormat format, unsigned grid, float* gate, const float* up, const Out& o,
                StreamHandle stream) {
  switch (format) {
    case ActFormat::kQ8_K:
      launch_kernel(glu_quantize_kernel<kOp, ActFormat::kQ8_K>, grid, 256, 0, stream, gate, up, o.q,
                    o.d, o.s);
      break;
    case ActFormat::kQ8_0:
      launch_kernel(glu_quantize_kernel<kOp, ActFormat::kQ8_0>, grid, 256, 0, stream, gate, up, o.q,
                    o.d, o.s);
      break;
    case ActFormat::kQ8_1:
      launch_kernel(glu_quantize_kernel<kOp, ActFormat::kQ8_1>, grid, 256, 0, stream, gate, up, o.q,
                    o.d, o.s);
      break;
  }
}

}  // namespace

bool norm_quantize_fits(ActFormat format, int64_t n) {
  return n % (format == ActFormat::kQ8_K ? 256 : 32) == 0;
}

ActQ8 rms_norm_quantize(const float* x, const float* w, int64_t n_rows, int64_t n, float eps,
                        float* out, ActFormat format, void* scratch, StreamHandle stream) {
  const Out o = carve(scratch, n_rows * n);
  const dim3 grid(static_cast<unsigned>(n_rows), norm_chunks(n));
  const int nn = static_cast<int>(n);
  switch (format) {
    case ActFormat::kQ8_K:
      launch_kernel(norm_quantize_kernel<ActFormat::kQ8_K>, grid, kNormThreads, 0, stream, x, w, nn,
                    eps, out, o.q, o.d, o.s);
      break;
    case ActFormat::kQ8_0:
      launch_kernel(norm_quantize_kernel<ActFormat::kQ8_0>, grid, kNormThreads, 0, stream, x, w, nn,
                    eps, out, o.q, o.d, o.s);
      break;
    case ActFormat::kQ8_1:
      launch_kernel(norm_quantize_kernel<ActFormat::kQ8_1>, grid, kNormThreads, 0, stream, x, w, nn,
                    eps, out, o.q, o.d, o.s);
      break;
  }
  return ActQ8{o.q, o.d, o.s, out};
}

ActQ8 glu_quantize(UnaryOp op, float* gate, const float* up, int64_t n, ActFormat format,
                   void* scratch, StreamHandle stream) {
  const Out o = carve(scratch, n);
  const unsigned grid = static_cast<unsigned>(n / 256);
  switch (op) {
    case UnaryOp::kSilu:
      launch_glu<UnaryOp::kSilu>(format, grid, gate, up, o, stream);
      break;
    case UnaryOp::kGeluTanh:
      launch_glu<UnaryOp::kGeluTanh>(format, grid, gate, up, o, stream);
      break;
    case UnaryOp::kGeluTanhFp16:
      launch_glu<UnaryOp::kGeluTanhFp16>(format, grid, gate, up, o, stream);
      break;
    case UnaryOp::kSwigluOai:
      launch_glu<UnaryOp::kSwigluOai>(format, grid, gate, up, o, stream);
      break;
  }
  return ActQ8{o.q, o.d, o.s, gate};
}

}  // namespace hypura::compute::cuda
