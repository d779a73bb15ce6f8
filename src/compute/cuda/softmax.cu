#include "compute/cuda/common.cuh"
#include "compute/cuda/softmax.h"
#include "compute/cuda/softmax_impl.cuh"

namespace hypura::compute::cuda {
namespace {

__global__ void __launch_bounds__(kSoftmaxThreads) softmax_kernel(float* x, int n) {
  grid_dep_wait();
  grid_dep_launch();
  softmax_row(x + static_cast<size_t>(blockIdx.x) * n, n);
}

}  // namespace

void softmax(float* x, int64_t n_rows, int64_t n, StreamHandle stream) {
  if (n_rows == 0) return;
  launch_kernel(softmax_kernel, static_cast<unsigned>(n_rows), kSoftmaxThreads, 0, stream, x,
                static_cast<int>(n));
}

}  // namespace hypura::compute::cuda
