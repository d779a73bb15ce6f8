// Internal, benchmark-only: the matvec kernel configuration override (matvec_impl.cuh) for
// host code that does not include CUDA headers.
#pragma once

namespace hypura::compute::cuda {

// -1 (default): the shape policy; 0: one row per warp; 1: two rows per warp; 2: each row
// split over two warps. Read at every launch; set only from a benchmark's single thread.
extern int g_matvec_config_override;

// The fewest tokens a batched product of a format with a tensor-core form (Q4_K, Q5_K,
// Q6_K) runs on the tensor cores (matvec_mma_kernel) rather than with dp4a; 17: never.
// Default 5: against dp4a on an H200 they take 0.5-1.0x the time at 2 tokens, 0.9-1.4x at
// 4 and 1.3-2.1x at 8 (docs/BENCHMARKS.md#gpu-batched). Read at every launch; set only
// from a test's or a benchmark's single thread.
extern int g_matvec_mma_min_tokens;

}  // namespace hypura::compute::cuda
