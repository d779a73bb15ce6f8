#include "compute/cuda/common.cuh"
#include "compute/cuda/host_signal.h"

namespace hypura::compute::cuda {
namespace {

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The copies queued before it (the rows down) are complete by stream order; the fence
// orders this thread's view before the flag the host polls.
__global__ void signal_host_kernel(HostFlag* flag) {
  grid_dep_wait();
  volatile uint32_t* ready = &flag->ready;
  __threadfence_system();
  *ready = *ready + 1;
  __threadfence_system();
  grid_dep_launch();
}

__global__ void wait_for_host_kernel(HostFlag* flag) {
  grid_dep_wait();
  volatile uint32_t* ready = &flag->ready;
  volatile uint32_t* done = &flag->done;
  const uint64_t t0 = global_ns();
  while (*done != *ready) {
    __nanosleep(128);
    if (global_ns() - t0 > kHostWaitTimeoutNs) {
      *reinterpret_cast<volatile uint32_t*>(&flag->timed_out) = 1;
      break;
    }
  }
  __threadfence_system();
  grid_dep_launch();
}

}  // namespace

void signal_host(HostFlag* flag, StreamHandle stream) {
  launch_kernel(signal_host_kernel, 1, 1, 0, stream, flag);
}

void wait_for_host(HostFlag* flag, StreamHandle stream) {
  launch_kernel(wait_for_host_kernel, 1, 1, 0, stream, flag);
}

}  // namespace hypura::compute::cuda
