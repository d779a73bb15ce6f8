// Internal, benchmark-only: the matvec kernel configuration override (matvec_impl.cuh) for
// host code that does not include CUDA headers.
#pragma once

namespace hypura::compute::cuda {

// -1 (default): the shape policy; 0: one row per warp; 1: two rows per warp; 2: each row
// split over two warps. Read at every launch; set only from a benchmark's single thread.
extern int g_matvec_config_override;

// The fewest tokens a batched product of a format with a tensor-core form (Q4_K, Q5_K,
// Q6_K) runs on the tensor cores (matvec_mma_kernel) rather than with dp4a; 17: never.
// Default 4: the fewest at which the tensor cores (asking L2 one group ahead) beat dp4a at
// every shape timed (Q4_K; docs/BENCHMARKS.md#gpu-batched). Read at every launch; set only
// from a test's or a benchmark's single thread.
extern int g_matvec_mma_min_tokens;

// The fewest pairs per expert in use, on average, with which a grouped product (MoE
// experts, matvec_grouped) of a format with a tensor-core form reads each expert once for
// all its pairs on the tensor cores rather than once per pair; 0x7fff: never. Default 3: at
// 2 the tensor cores took about as long for two tokens as two single-token products (the
// kernel bench before the L2 requests); 2 was not timed end to end. Read at every launch;
// set only from a test's or a benchmark's single thread.
extern int g_matvec_mma_min_pairs;

// How many groups of 4 blocks ahead of its loads matvec_mma_kernel asks L2 for a tile's
// weights (0: no requests). Default 1: faster than none at every shape timed, and 2, 4 and
// 8 no faster (docs/BENCHMARKS.md#gpu-batched). Read at every launch; set only from a
// benchmark's single thread.
extern int g_matvec_mma_prefetch;

}  // namespace hypura::compute::cuda
