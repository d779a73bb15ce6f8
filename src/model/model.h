// Model and Forward: a transformer's structure and the computation of its logits.
//
// Model is the immutable part read from the GGUF file: hyperparameters and the tensor
// directory (which tensor id plays which part in each layer). Forward owns the scratch
// buffers of one forward pass (sized once for a maximum batch, so the token loop does not
// allocate) and runs tokens through the layers of the model's architecture, getting
// every weight from a WeightProvider and keeping keys/values in a KvCache.
//
// Batch invariance: a token's logits do not depend on how the sequence is split into
// calls of run() (one batch, chunks or one token at a time) -- the matmuls reduce each
// output in a fixed order and attention handles each query row independently, reading
// keys back from the cache.
//
// Stages: a Forward may run the layers on several Blocks in turn, a model split between
// the CPU and a GPU (the GPU tier, part 2): each stage computes a run of consecutive
// layers with its own provider (host weights, device weights), the first embeds the
// tokens, the last computes the output head, and each later stage continues from the
// previous one's residual rows (host memory: only the last stage may be on a device).
// Each sequence's KvCache keeps every layer's rows where that layer's stage computes.
//
// Thread-safety: Model is shared read-only; a Forward is used by one thread at a time
// (the compute pool parallelises inside).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/seq_rows.h"
#include "model/weights.h"

namespace hypura::gguf {
class GgufFile;
}
namespace hypura::compute {
class Context;
}

namespace hypura::model {

class WeightProvider;

class Model {
 public:
  // Reads hyperparameters and finds every tensor; errors name the missing piece.
  static Result<std::shared_ptr<const Model>> create(const gguf::GgufFile& file);

  const HParams& hparams() const { return hp_; }
  const WeightMap& weights() const { return weights_; }

 private:
  HParams hp_;
  WeightMap weights_;
};

class Blocks;  // model/blocks.h

// Layers [previous stage's end, end) computed by `blocks` (Forward's stages). A Blocks may
// serve a stage of each list (set_wide_stages): one pass runs at a time.
struct ForwardStage {
  std::shared_ptr<Blocks> blocks;
  int64_t end = 0;
};

class Forward {
 public:
  // On the CPU. max_batch: most tokens per run() call; n_ctx: the KV cache's length
  // (attention scratch).
  Forward(std::shared_ptr<const Model> model, compute::Context& ctx, WeightProvider& provider,
          int64_t max_batch, int64_t n_ctx);
  // On the blocks' device (cuda_blocks.h: make_cuda_blocks); run() then needs a KV cache
  // in that device's memory.
  Forward(std::shared_ptr<const Model> model, std::unique_ptr<Blocks> blocks, int64_t max_batch);
  // In stages (see above). REQUIRES: ends increasing up to n_layer (a stage may hold no
  // layer: a CPU stage that only embeds, or a GPU stage that only computes the head),
  // every stage but the last on the CPU, each Blocks built for max_batch rows.
  Forward(std::shared_ptr<const Model> model, std::vector<ForwardStage> stages, int64_t max_batch);
  ~Forward();

  // Stages for batches of at least min_rows rows instead of the ones above: a split model's
  // prompts, where the GPU computes every layer (the host layers' weights copied over the
  // bus) faster than the CPU computes its share. The host layers' KV rows are mirrored in
  // device memory (KvCache::on_device's mirror), synced around each such batch.
  void set_wide_stages(std::vector<ForwardStage> stages, int64_t min_rows);

  int64_t max_batch() const { return max_batch_; }

  // Processes tokens[0..n_tokens) at positions pos..pos+n_tokens-1, writing their keys
  // and values into kv. logits: (n_tokens, n_vocab) when all_logits, else (1, n_vocab)
  // for the last token only; null: no output layer (embeddings). hidden, when not null:
  // (n_tokens, n_embd) the final-norm hidden states, the output layer's input.
  // REQUIRES: 0 < n_tokens <= max_batch, pos + n_tokens <= kv.n_ctx(), every token id
  // < n_vocab, kv where the blocks compute (checked: error).
  Status run(const int32_t* tokens, int64_t n_tokens, int64_t pos, KvCache& kv, bool all_logits,
             float* logits, float* hidden = nullptr);

  // One pass over the weights for several sequences at once (continuous batching):
  // tokens holds each sequence's n_tokens ids in order; logits (sum of n_logits, n_vocab)
  // gets the last n_logits rows of each, in order. A sequence's logits are the same as its run()
  // alone on the CPU (batch invariance), within the GPU's tolerance there (docs/GPU.md). REQUIRES:
  // what run() requires of each sequence, 1..max_batch rows in all, distinct KV caches, each no
  // longer than the context this Forward was built for (checked: error).
  Status run_batch(const int32_t* tokens, std::span<const SeqRows> seqs, float* logits);

  int64_t n_ctx() const;  // the longest KV cache a batch may attend over

 private:
  Status check(const int32_t* tokens, std::span<const SeqRows> seqs) const;
  Status run_rows(const int32_t* tokens, std::span<const SeqRows> seqs, float* logits,
                  float* hidden);
  Status run_stages(std::vector<ForwardStage>& stages, const int32_t* tokens,
                    std::span<const SeqRows> seqs, float* logits, float* hidden);
  // Layers [first, stage.end) on the stage's blocks, releasing each.
  Status run_layers(ForwardStage& stage, int64_t first);
  bool wide(int64_t n_rows) const { return !wide_.empty() && n_rows >= wide_min_rows_; }
  std::vector<ForwardStage>& stages_for(int64_t n_rows) { return wide(n_rows) ? wide_ : stages_; }
  const std::vector<ForwardStage>& stages_for(int64_t n_rows) const {
    return wide(n_rows) ? wide_ : stages_;
  }

  std::shared_ptr<const Model> model_;
  int64_t max_batch_;
  std::vector<ForwardStage> stages_;
  std::vector<ForwardStage> wide_;  // set_wide_stages (empty: none)
  int64_t wide_min_rows_ = 0;
};

}  // namespace hypura::model
