#include "compute/cuda/common.cuh"
#include "compute/cuda/norm_impl.cuh"
#include "compute/cuda/strided.h"

namespace hypura::compute::cuda {
namespace {

__global__ void copy_cols_kernel(const float* __restrict__ src, int64_t src_stride,
                                 float* __restrict__ dst, int64_t dst_stride, int64_t n,
                                 int width) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / width, c = i % width;
  dst[r * dst_stride + c] = src[r * src_stride + c];
}

// One block per row, as rms_norm_kernel (norm.cu): the same scale and products.
__global__ void rms_norm_cols_kernel(float* x, int64_t stride, int n, const float* __restrict__ w,
                                     float eps) {
  __shared__ double partial[kNormThreads / 32];
  grid_dep_wait();
  grid_dep_launch();
  float* xr = x + static_cast<int64_t>(blockIdx.x) * stride;
  const float s = row_rms_scale(xr, n, eps, partial);
  for (int i = threadIdx.x; i < n; i += kNormThreads) xr[i] = normed(xr, w, i, s);
}

}  // namespace

void copy_cols(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t n_rows,
               int64_t width, StreamHandle stream) {
  const int64_t n = n_rows * width;
  if (n == 0) return;
  launch_kernel(copy_cols_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, src,
                src_stride, dst, dst_stride, n, static_cast<int>(width));
}

void rms_norm_cols(float* x, int64_t n_rows, int64_t stride, int64_t n, const float* w, float eps,
                   StreamHandle stream) {
  if (n_rows == 0) return;
  launch_kernel(rms_norm_cols_kernel, static_cast<unsigned>(n_rows), kNormThreads, 0, stream, x,
                stride, static_cast<int>(n), w, eps);
}

}  // namespace hypura::compute::cuda
