#include "compute/cuda/common.cuh"
#include "compute/cuda/unary.h"
#include "compute/cuda/unary_impl.cuh"

namespace hypura::compute::cuda {
namespace {

template <UnaryOp kOp>
__global__ void unary_kernel(float* x, int64_t n) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = apply<kOp>(x[i]);
}

template <UnaryOp kOp>
__global__ void glu_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n) {
  grid_dep_wait();
  grid_dep_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) gate[i] = glu_one<kOp>(gate[i], up[i]);
}

}  // namespace

void glu(UnaryOp op, float* gate, const float* up, int64_t n, StreamHandle stream) {
  if (n == 0) return;
  const unsigned grid = static_cast<unsigned>((n + 255) / 256);
  switch (op) {
    case UnaryOp::kSilu:
      launch_kernel(glu_kernel<UnaryOp::kSilu>, grid, 256, 0, stream, gate, up, n);
      break;
    case UnaryOp::kGeluTanh:
      launch_kernel(glu_kernel<UnaryOp::kGeluTanh>, grid, 256, 0, stream, gate, up, n);
      break;
    case UnaryOp::kGeluTanhFp16:
      launch_kernel(glu_kernel<UnaryOp::kGeluTanhFp16>, grid, 256, 0, stream, gate, up, n);
      break;
    case UnaryOp::kSwigluOai:
      launch_kernel(glu_kernel<UnaryOp::kSwigluOai>, grid, 256, 0, stream, gate, up, n);
      break;
  }
}

void unary(UnaryOp op, float* x, int64_t n, StreamHandle stream) {
  if (n == 0) return;
  const unsigned grid = static_cast<unsigned>((n + 255) / 256);
  switch (op) {
    case UnaryOp::kSilu:
      launch_kernel(unary_kernel<UnaryOp::kSilu>, grid, 256, 0, stream, x, n);
      break;
    case UnaryOp::kGeluTanh:
      launch_kernel(unary_kernel<UnaryOp::kGeluTanh>, grid, 256, 0, stream, x, n);
      break;
    case UnaryOp::kGeluTanhFp16:
      launch_kernel(unary_kernel<UnaryOp::kGeluTanhFp16>, grid, 256, 0, stream, x, n);
      break;
    case UnaryOp::kSwigluOai:  // gated only
      break;
  }
}

}  // namespace hypura::compute::cuda
