// CudaBlocks: the Blocks of blocks.h on a CUDA GPU, for a model whose weights and KV cache
// are all in device memory (part 1 of the GPU tier: a resident model).
//
// The architecture files drive it unchanged; its row buffers are device memory taken once
// with cudaMalloc, its weight views come from a provider of device views
// (tiers/device_weights.h), and its ops queue kernels of compute/cuda on one stream:
//   linear      n_tokens <= kCudaSmallBatch: the activations quantized once as the CPU
//               rounds them, then matvecs reading the weights once for all rows (integer
//               dots, as exact as the CPU's); products sharing an input (Q, K, V; gate, up)
//               share the quantization; larger batches: cuBLAS on F16 (gemm.h)
//   attention   the batch's keys and values rounded to F16 into the device cache, then
//               decode attention per token (up to kCudaDecodeAttention tokens, or a
//               speculative pass's rows up to kCudaSmallBatch) or prefill attention
//   moe_ffn     router, softmax and top-k on the device; few tokens: grouped expert
//               matvecs over (token, slot) pairs, no host round trip; a prompt: the
//               selection copied to the host, each used expert's rows gathered and
//               multiplied as a matrix, the outputs scattered back, summed in slot order;
//               experts in host memory (HostExpertLayers): computed by the host thread,
//               between a copy down and a copy up, in a handshake with the stream
// Nothing is allocated per token; the host copies of a step are the token ids and
// positions (one small copy) and the logits (or hidden states) at finish(), which also
// synchronizes the stream and returns the first error of the batch.
//
// The provider's routing hooks (WeightProvider::routing()) are not called: a resident
// device provider has nothing to prefetch.
//
// Thread-safety: one forward pass at a time, from one thread (the stream's device current).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>

#include "common/status.h"
#include "model/blocks.h"
#include "model/host_experts.h"

#if HYPURA_HAVE_CUDA
#include "compute/cuda/moe.h"
#endif

namespace hypura::model {

// Batches of at most this many tokens multiply by batched matvecs (exact integer dots,
// weights read once); larger ones by the matrix product, which dequantizes the weights to
// F16 first (faster from about this size on: the F16 copy costs 7x the Q4_K bytes).
inline constexpr int64_t kCudaSmallBatch = 16;
// Batches of at most this many tokens run decode attention token by token.
inline constexpr int64_t kCudaDecodeAttention = 4;

// Whether the GPU forward pass computes this model (head sizes, weight types); the error
// says why not. Cheap: no device access.
Status cuda_supports(const HParams& hp, const gguf::GgufFile& file);

#if HYPURA_HAVE_CUDA
// The routing kernel's options for hp's routing (routing.h's variants): logit_bias the
// router's bias (gpt-oss), select_bias exp_probs_b; both device F32 vectors, or null.
compute::cuda::RouteOptions cuda_route_options(const HParams& hp, const float* logit_bias,
                                               const float* select_bias);
#endif

// Device bytes make_cuda_blocks() takes (buffers, scratch, cuBLAS workspace estimate).
uint64_t cuda_blocks_bytes(const HParams& hp, const gguf::GgufFile& file, int64_t max_batch,
                           int64_t n_ctx);

// The routed experts of layers [0, n_layers) of a MoE model stay in host memory and
// compute on the CPU (the planner's expert split: scheduler::GpuSplit::host_experts). A
// layer among them: the GPU computes its attention, the FFN norm and the routing, copies
// the normalized rows and the selection to pinned host memory and raises a flag there;
// the host thread (in finish(), after the step is queued or its CUDA graph launched) runs
// `experts` on them and lets the stream go on (compute/cuda/host_signal.h); the slot
// outputs go back up and the GPU sums them by the routing weights as for its own experts.
// Batches of max_rows rows or more use the provider's views of those experts instead
// (a split's prompts, whose provider stages them: tiers/staged_weights.h).
struct HostExpertLayers {
  HostExperts* experts = nullptr;
  int64_t n_layers = 0;
  int64_t max_rows = std::numeric_limits<int64_t>::max();
};

// The GPU blocks on the current CUDA device. device_weights must hand out device views of
// every tensor but the host experts'; kResourceExhausted when the buffers do not fit,
// kUnsupported without CUDA. graphs: decode steps replay captured CUDA graphs (false:
// every step eager, for profilers that time kernels one by one).
Result<std::unique_ptr<Blocks>> make_cuda_blocks(const HParams& hp, const WeightMap& weights,
                                                 const gguf::GgufFile& file,
                                                 WeightProvider& device_weights, int64_t max_batch,
                                                 int64_t n_ctx, HostExpertLayers host = {},
                                                 bool graphs = true);

}  // namespace hypura::model
