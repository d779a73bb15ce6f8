#include "model/model.h"

#include <algorithm>

#include "compute/compute.h"
#include "gguf/gguf.h"
#include "model/architectures.h"
#include "model/cpu_blocks.h"
#include "model/weight_provider.h"

namespace hypura::model {

Result<std::shared_ptr<const Model>> Model::create(const gguf::GgufFile& file) {
  auto model = std::make_shared<Model>();
  HYPURA_ASSIGN_OR_RETURN(model->hp_, read_hparams(file));
  HYPURA_ASSIGN_OR_RETURN(model->weights_, build_weight_map(file, model->hp_));
  if (model->weights_.rope_freqs != kNone &&
      file.tensors()[model->weights_.rope_freqs].type != gguf::GgmlType::F32) {
    return unsupported("tensor 'rope_freqs.weight' must be F32");
  }
  return std::shared_ptr<const Model>(std::move(model));
}

Forward::Forward(std::shared_ptr<const Model> model, compute::Context& ctx,
                 WeightProvider& provider, int64_t max_batch, int64_t n_ctx)
    : model_(std::move(model)),
      max_batch_(max_batch),
      blocks_(std::make_unique<CpuBlocks>(model_->hparams(), model_->weights(), ctx, provider,
                                          max_batch, n_ctx)) {}

Forward::Forward(std::shared_ptr<const Model> model, std::unique_ptr<Blocks> blocks, int64_t max_batch)
    : model_(std::move(model)), max_batch_(max_batch), blocks_(std::move(blocks)) {}

Forward::~Forward() = default;

int64_t Forward::n_ctx() const { return blocks_->n_ctx(); }

Status Forward::run(const int32_t* tokens, int64_t n_tokens, int64_t pos, KvCache& kv,
                    bool all_logits, float* logits, float* hidden) {
  const SeqRows seq{&kv, pos, n_tokens};
  HYPURA_RETURN_IF_ERROR(check(tokens, std::span(&seq, 1)));
  return run_rows(tokens, std::span(&seq, 1), all_logits, logits, hidden);
}

Status Forward::run_batch(const int32_t* tokens, std::span<const SeqRows> seqs, float* logits) {
  HYPURA_RETURN_IF_ERROR(check(tokens, seqs));
  return run_rows(tokens, seqs, /*all_logits=*/false, logits, nullptr);
}

Status Forward::check(const int32_t* tokens, std::span<const SeqRows> seqs) const {
  const HParams& hp = model_->hparams();
  int64_t n_rows = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqRows& s = seqs[i];
    const KvCache& kv = *s.kv;
    if (s.n_tokens <= 0) return invalid_argument("a sequence of " + std::to_string(s.n_tokens) + " tokens");
    if (s.pos < 0 || s.pos + s.n_tokens > kv.n_ctx()) {
      return resource_exhausted("context full: positions " + std::to_string(s.pos) + ".." +
                                std::to_string(s.pos + s.n_tokens - 1) + " exceed n_ctx " +
                                std::to_string(kv.n_ctx()));
    }
    if (kv.n_ctx() > blocks_->n_ctx()) {
      return invalid_argument("a KV cache of " + std::to_string(kv.n_ctx()) +
                              " positions exceeds the forward pass's context of " +
                              std::to_string(blocks_->n_ctx()));
    }
    if (kv.on_device() != blocks_->on_device()) {
      return invalid_argument(std::string("the KV cache is in ") + (kv.on_device() ? "device" : "host") +
                              " memory but the forward pass runs on the " +
                              (blocks_->on_device() ? "GPU" : "CPU"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (seqs[j].kv == s.kv) return invalid_argument("two sequences of one batch share a KV cache");
    }
    n_rows += s.n_tokens;
  }
  if (seqs.empty() || n_rows > max_batch_) {
    return invalid_argument("batch of " + std::to_string(n_rows) + " tokens; expected 1.." +
                            std::to_string(max_batch_));
  }
  for (int64_t i = 0; i < n_rows; ++i) {
    if (tokens[i] < 0 || tokens[i] >= hp.n_vocab) {
      return invalid_argument("token id " + std::to_string(tokens[i]) + " out of range (n_vocab " +
                              std::to_string(hp.n_vocab) + ")");
    }
  }
  return Status::ok();
}

Status Forward::run_rows(const int32_t* tokens, std::span<const SeqRows> seqs, bool all_logits,
                         float* logits, float* hidden) {
  const HParams& hp = model_->hparams();
  const WeightMap& wm = model_->weights();
  Blocks& b = *blocks_;
  WeightProvider& provider = b.provider();
  b.begin(seqs, logits != nullptr && hidden == nullptr);

  // Tensors outside the layer stack: layer -1.
  const TensorId global_ids[4] = {wm.token_embd, wm.output_norm, wm.output,
                                           wm.rope_freqs == kNone ? wm.output : wm.rope_freqs};
  compute::WeightView g[4];
  HYPURA_RETURN_IF_ERROR(provider.acquire(-1, global_ids, g));
  const compute::WeightView &embd = g[0], &out_norm = g[1], &output = g[2];
  b.set_rope_factors(wm.rope_freqs == kNone ? nullptr : static_cast<const float*>(g[3].data));

  b.embed(embd, tokens);
  if (hp.embd_scale != 1.0f) b.scale(b.x(), hp.n_embd, hp.embd_scale);

  const LayerFn layer = layer_fn(hp.arch);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (il + 1 < hp.n_layer) provider.hint(static_cast<int>(il + 1));
    Status st = layer(b, il);
    provider.release(static_cast<int>(il));
    if (!st.is_ok()) {
      provider.release(-1);
      return st.with_context("layer " + std::to_string(il));
    }
  }

  b.norm(b.x(), out_norm, b.cur());
  Status st = b.finish(output, all_logits, logits, hidden);
  provider.release(-1);
  return st;
}

}  // namespace hypura::model
