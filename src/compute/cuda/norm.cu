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

// Few rows: a block per kNormThreads values of a row (grid: rows x chunks, the last one
// partial), each computing the row's scale (the same operations in every block) and
// normalizing its chunk, one value a thread (the fused norm + quantization's split,
// fused.cu; a block per row walks its chunks in turn, latency-bound: docs/GPU.md).
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_split_kernel(const float* __restrict__ x, const float* __restrict__ w, int n,
                          float eps, float* out) {
  __shared__ double partial[kNormThreads / 32];
  grid_dep_wait();
  grid_dep_launch();
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  const float sc = row_rms_scale(xr, n, eps, partial);
  const int i = blockIdx.y * kNormThreads + threadIdx.x;
  if (i < n) out[row * n + i] = normed(xr, w, i, sc);
}

// Rows per launch up to which the split kernel is used (each of its blocks reads the whole
// row: 16 reads of a 4096-wide row).
constexpr int64_t kSplitNormRows = 16;

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* out,
              StreamHandle stream) {
  if (n_rows == 0) return;
  if (n_rows <= kSplitNormRows && x != out) {
    const dim3 grid(static_cast<unsigned>(n_rows), norm_chunks(n));
    launch_kernel(rms_norm_split_kernel, grid, kNormThreads, 0, stream, x, w, static_cast<int>(n),
                  eps, out);
    return;
  }
  launch_kernel(rms_norm_kernel, static_cast<unsigned>(n_rows), kNormThreads, 0, stream, x, w,
                static_cast<int>(n), eps, out);
}

}  // namespace hypura::compute::cuda
