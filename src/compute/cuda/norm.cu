#include "compute/cuda/common.cuh"
#include "compute/cuda/norm.h"
#include "compute/cuda/norm_impl.cuh"

namespace hypura::compute::cuda {
namespace {

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, int n,
                                float eps, float* out) {
  __shared__ double partial[kNormThreads / 32];
  grid_dep_wait();
  grid_dep_launch();
  const float* xr = x + static_cast<size_t>(blockIdx.x) * n;
  float* yr = out + static_cast<size_t>(blockIdx.x) * n;
  const float s = row_rms_scale(xr, n, eps, partial);
  for (int i = threadIdx.x; i < n; i += kNormThreads) yr[i] = normed(xr, w, i, s);
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* out,
              StreamHandle stream) {
  if (n_rows == 0) return;
  launch_kernel(rms_norm_kernel, static_cast<unsigned>(n_rows), kNormThreads, 0, stream, x, w,
                static_cast<int>(n), eps, out);
}

}  // namespace hypura::compute::cuda
