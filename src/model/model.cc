#include "model/model.h"

#include <algorithm>
#include <cassert>

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

namespace {

std::vector<ForwardStage> one_stage(std::unique_ptr<Blocks> blocks, int64_t n_layer) {
  std::vector<ForwardStage> stages;
  stages.push_back({std::move(blocks), n_layer});
  return stages;
}

}  // namespace

Forward::Forward(std::shared_ptr<const Model> model, compute::Context& ctx,
                 WeightProvider& provider, int64_t max_batch, int64_t n_ctx)
    : Forward(model,
              std::make_unique<CpuBlocks>(model->hparams(), model->weights(), ctx, provider,
                                          max_batch, n_ctx),
              max_batch) {}

Forward::Forward(std::shared_ptr<const Model> model, std::unique_ptr<Blocks> blocks,
                 int64_t max_batch)
    : Forward(model, one_stage(std::move(blocks), model->hparams().n_layer), max_batch) {}

Forward::Forward(std::shared_ptr<const Model> model, std::vector<ForwardStage> stages,
                 int64_t max_batch)
    : model_(std::move(model)), max_batch_(max_batch), stages_(std::move(stages)) {
  assert(!stages_.empty() && stages_.back().end == model_->hparams().n_layer);
  for (size_t i = 0; i + 1 < stages_.size(); ++i) {
    assert(!stages_[i].blocks->on_device() && stages_[i].end <= stages_[i + 1].end);
  }
}

Forward::~Forward() = default;

void Forward::set_wide_stages(std::vector<ForwardStage> stages, int64_t min_rows) {
  assert(!stages.empty() && stages.back().end == model_->hparams().n_layer);
  wide_ = std::move(stages);
  wide_min_rows_ = min_rows;
}

int64_t Forward::n_ctx() const {
  int64_t n = stages_.front().blocks->n_ctx();
  for (const auto* list : {&stages_, &wide_}) {
    for (const ForwardStage& st : *list) n = std::min(n, st.blocks->n_ctx());
  }
  return n;
}

namespace {

int64_t stage_begin(const std::vector<ForwardStage>& stages, size_t i) {
  return i == 0 ? 0 : stages[i - 1].end;
}

}  // namespace

Status Forward::run(const int32_t* tokens, int64_t n_tokens, int64_t pos, KvCache& kv,
                    bool all_logits, float* logits, float* hidden) {
  const SeqRows seq{&kv, pos, n_tokens, all_logits ? n_tokens : 1};
  HYPURA_RETURN_IF_ERROR(check(tokens, std::span(&seq, 1)));
  return run_rows(tokens, std::span(&seq, 1), logits, hidden);
}

Status Forward::run_batch(const int32_t* tokens, std::span<const SeqRows> seqs, float* logits) {
  HYPURA_RETURN_IF_ERROR(check(tokens, seqs));
  return run_rows(tokens, seqs, logits, nullptr);
}

// A stage's layers must have their rows where it computes.
static Status check_kv_placement(const KvCache& kv, const Blocks& b, int64_t first, int64_t end) {
  for (int64_t il = first; il < end; ++il) {
    if (b.on_device() ? !kv.on_device(il) : !kv.on_host(il)) {
      return invalid_argument("layer " + std::to_string(il) + "'s KV cache has no rows in " +
                              (b.on_device() ? "device" : "host") +
                              " memory, where the layer runs");
    }
  }
  return Status::ok();
}

// A draft tree's nodes continue earlier nodes.
static Status check_tree(const SeqRows& s) {
  if (s.tree_parent == nullptr) return Status::ok();
  if (s.tree_base < 0 || s.tree_base > s.pos)
    return invalid_argument("a draft tree after its rows");
  for (int64_t node = 0; node < s.pos + s.n_tokens - s.tree_base; ++node) {
    const int32_t parent = s.tree_parent[node];
    if (parent < -1 || parent >= node)
      return invalid_argument("draft tree node " + std::to_string(node) + " continues node " +
                              std::to_string(parent));
  }
  return Status::ok();
}

Status Forward::check(const int32_t* tokens, std::span<const SeqRows> seqs) const {
  const HParams& hp = model_->hparams();
  int64_t n_rows = 0;
  for (const SeqRows& s : seqs) n_rows += std::max<int64_t>(s.n_tokens, 0);
  const std::vector<ForwardStage>& stages = stages_for(n_rows);
  n_rows = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqRows& s = seqs[i];
    const KvCache& kv = *s.kv;
    if (s.n_tokens <= 0)
      return invalid_argument("a sequence of " + std::to_string(s.n_tokens) + " tokens");
    if (s.n_logits < 1 || s.n_logits > s.n_tokens) {
      return invalid_argument("logits of " + std::to_string(s.n_logits) +
                              " rows of a sequence of " + std::to_string(s.n_tokens));
    }
    if (s.pos < 0 || s.pos + s.n_tokens > kv.n_ctx()) {
      return resource_exhausted("context full: positions " + std::to_string(s.pos) + ".." +
                                std::to_string(s.pos + s.n_tokens - 1) + " exceed n_ctx " +
                                std::to_string(kv.n_ctx()));
    }
    if (kv.n_ctx() > n_ctx()) {
      return invalid_argument("a KV cache of " + std::to_string(kv.n_ctx()) +
                              " positions exceeds the forward pass's context of " +
                              std::to_string(n_ctx()));
    }
    for (size_t st = 0; st < stages.size(); ++st) {
      HYPURA_RETURN_IF_ERROR(
          check_kv_placement(kv, *stages[st].blocks, stage_begin(stages, st), stages[st].end));
    }
    HYPURA_RETURN_IF_ERROR(check_tree(s));
    for (size_t j = 0; j < i; ++j) {
      if (seqs[j].kv == s.kv)
        return invalid_argument("two sequences of one batch share a KV cache");
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

Status Forward::run_layers(ForwardStage& stage, int64_t first) {
  Blocks& b = *stage.blocks;
  WeightProvider& provider = b.provider();
  const LayerFn layer = layer_fn(model_->hparams().arch);
  for (int64_t il = first; il < stage.end; ++il) {
    Status st = layer(b, il);
    provider.release(static_cast<int>(il));
    if (!st.is_ok()) return st.with_context("layer " + std::to_string(il));
  }
  return Status::ok();
}

// A wide batch (the GPU computes the host layers too) syncs their mirrored KV rows: the
// rows before the batch to the device first, the batch's own back to the host after. A
// batch with a CPU stage leaves those rows newer on the host.
Status Forward::run_rows(const int32_t* tokens, std::span<const SeqRows> seqs, float* logits,
                         float* hidden) {
  int64_t n_rows = 0;
  for (const SeqRows& s : seqs) n_rows += s.n_tokens;
  const bool is_wide = wide(n_rows);
  for (const SeqRows& s : seqs) {
    if (is_wide) {
      HYPURA_RETURN_IF_ERROR(s.kv->mirror_to_device(s.pos));
    } else {
      s.kv->host_rows_written(s.pos);
    }
  }
  HYPURA_RETURN_IF_ERROR(run_stages(stages_for(n_rows), tokens, seqs, logits, hidden));
  if (is_wide) {
    for (const SeqRows& s : seqs)
      HYPURA_RETURN_IF_ERROR(s.kv->mirror_to_host(s.pos, s.pos + s.n_tokens));
  }
  return Status::ok();
}

Status Forward::run_stages(std::vector<ForwardStage>& stages, const int32_t* tokens,
                           std::span<const SeqRows> seqs, float* logits, float* hidden) {
  const HParams& hp = model_->hparams();
  const WeightMap& wm = model_->weights();
  const bool logits_only = logits != nullptr && hidden == nullptr;
  // Tensors outside the layer stack (layer -1), each from the stage that uses it: the
  // embedding from the first, the head from the last, RoPE factors from every one.
  compute::WeightView embd, out_norm, output;
  size_t acquired = 0;
  const auto release_globals = [&] {
    for (size_t i = 0; i < acquired; ++i) stages[i].blocks->provider().release(-1);
  };
  for (size_t i = 0; i < stages.size(); ++i) {
    Blocks& b = *stages[i].blocks;
    b.begin(seqs, logits_only);
    if (Status st = b.provider().begin_pass(); !st.is_ok()) {
      release_globals();
      return st;
    }
    const bool first = i == 0, last = i + 1 == stages.size();
    TensorId ids[4];
    compute::WeightView* targets[4];
    compute::WeightView views[4], rope;
    size_t k = 0;
    const auto want = [&](TensorId id, compute::WeightView* to) {
      if (id == kNone) return;
      ids[k] = id;
      targets[k++] = to;
    };
    if (first) want(wm.token_embd, &embd);
    if (last) want(wm.output_norm, &out_norm);
    if (last) want(wm.output, &output);
    want(wm.rope_freqs, &rope);
    if (Status st = b.provider().acquire(-1, std::span(ids, k), std::span(views, k)); !st.is_ok()) {
      release_globals();
      return st;
    }
    ++acquired;
    for (size_t j = 0; j < k; ++j) *targets[j] = views[j];
    b.set_rope_factors(wm.rope_freqs == kNone ? nullptr : static_cast<const float*>(rope.data));
  }

  Blocks& front = *stages.front().blocks;
  front.embed(embd, tokens);
  if (hp.embd_scale != 1.0f) front.scale(front.x(), hp.n_embd, hp.embd_scale);
  for (size_t i = 0; i < stages.size(); ++i) {
    if (i > 0) stages[i].blocks->continue_from(stages[i - 1].blocks->x());
    if (Status st = run_layers(stages[i], stage_begin(stages, i)); !st.is_ok()) {
      release_globals();
      return st;
    }
  }
  Blocks& back = *stages.back().blocks;
  back.norm(back.x(), out_norm, back.cur());
  Status st = back.finish(output, logits, hidden);
  release_globals();
  return st;
}

}  // namespace hypura::model
