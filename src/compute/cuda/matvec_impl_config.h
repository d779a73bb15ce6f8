// Internal, benchmark-only: the matvec kernel configuration override (matvec_impl.cuh) for
// host code that does not include CUDA headers.
#pragma once

namespace hypura::compute::cuda {

// -1 (default): the shape policy; 0: one row per warp; 1: two rows per warp; 2: each row
// split over two warps. Read at every launch; set only from a benchmark's single thread.
extern int g_matvec_config_override;

}  // namespace hypura::compute::cuda
