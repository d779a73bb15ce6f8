#include "eval/expert_predictor_eval.h"

#include <algorithm>
#include <string>
#include <vector>

#include "compute/compute.h"
#include "experts/coactivation.h"
#include "model/kv_cache.h"
#include "tiers/mmap_provider.h"

namespace hypura::eval {
namespace {

// Delegates to `base`, records every route() call, and at layer `swap` hands the model
// layer swap+1's router in place of its own.
class RouterSwap final : public model::WeightProvider, public model::ExpertRouting {
 public:
  RouterSwap(model::WeightProvider& base, std::vector<model::TensorId> routers)
      : base_(base), routers_(std::move(routers)), routes_(routers_.size()) {}

  void swap_at(int layer) { swap_ = layer; }
  // (n_tokens * k) expert ids of the last pass's route(layer).
  const std::vector<int32_t>& routes(int layer) const { return routes_[layer]; }

  Status begin_pass() override { return base_.begin_pass(); }
  Status acquire(int layer, std::span<const model::TensorId> ids,
                 std::span<compute::WeightView> out) override {
    HYPURA_RETURN_IF_ERROR(base_.acquire(layer, ids, out));
    if (layer != swap_ || layer < 0 || layer + 1 >= static_cast<int>(routers_.size()))
      return Status::ok();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] != routers_[layer]) continue;
      const model::TensorId next = routers_[layer + 1];
      HYPURA_RETURN_IF_ERROR(base_.acquire(layer + 1, std::span(&next, 1), out.subspan(i, 1)));
    }
    return Status::ok();
  }
  Status acquire_experts(int layer, std::span<const model::ExpertRequest> requests,
                         std::span<compute::WeightView> out) override {
    return base_.acquire_experts(layer, requests, out);
  }
  void release(int layer) override { base_.release(layer); }
  model::ExpertRouting* routing() override { return this; }
  std::string name() const override { return "router-swap"; }

  void observe_hidden(int layer, std::span<const float> x, int64_t n_rows) override {}
  void route(int layer, std::span<const int32_t> selected, int n_expert_used) override {
    routes_[layer].assign(selected.begin(), selected.end());
  }
  void order_experts(int layer, std::span<int32_t> experts) override {}

 private:
  model::WeightProvider& base_;
  std::vector<model::TensorId> routers_;      // (n_layer): blk.L.ffn_gate_inp
  std::vector<std::vector<int32_t>> routes_;  // (n_layer): (n_tokens * k)
  int swap_ = -1;
};

Status run_pass(std::shared_ptr<const model::Model> m, RouterSwap& provider,
                std::span<const int32_t> tokens) {
  compute::Context ctx(2);
  const int64_t n = static_cast<int64_t>(tokens.size());
  model::KvCache kv(m->hparams(), n, false);
  model::Forward fwd(m, ctx, provider, n, n);
  std::vector<float> logits(static_cast<size_t>(m->hparams().n_vocab));  // (1, n_vocab)
  return fwd.run(tokens.data(), n, 0, kv, false, logits.data());
}

// Adds one token's prediction `pred` against the chosen experts `chosen` (both k ids).
void score(PredictorScore& s, std::span<const int32_t> pred, std::span<const int32_t> chosen,
           uint64_t expert_bytes) {
  s.predicted += pred.size();
  s.chosen += chosen.size();
  for (int32_t e : pred) {
    const bool hit = std::find(chosen.begin(), chosen.end(), e) != chosen.end();
    s.correct += hit;
    if (!hit) s.wasted_bytes += expert_bytes;
  }
}

}  // namespace

Result<PredictorEval> evaluate_expert_predictors(const gguf::GgufFile& file,
                                                 std::shared_ptr<const model::Model> model,
                                                 std::span<const int32_t> tokens) {
  const auto& hp = model->hparams();
  PredictorEval ev;
  ev.n_tokens = static_cast<int64_t>(tokens.size());
  ev.n_layer = static_cast<int>(hp.n_layer);
  ev.n_expert = static_cast<int>(hp.n_expert);
  ev.n_expert_used = static_cast<int>(hp.n_expert_used);
  if (ev.n_expert <= 0 || ev.n_layer < 2)
    return invalid_argument("predictor evaluation needs a MoE model of 2+ layers");
  if (tokens.empty()) return invalid_argument("predictor evaluation needs tokens");
  // Router tensor ids and one expert's bytes (gate + up + down slices) per layer.
  std::vector<model::TensorId> routers(static_cast<size_t>(ev.n_layer), -1);
  std::vector<uint64_t> expert_bytes(static_cast<size_t>(ev.n_layer), 0);
  const auto& tensors = file.tensors();
  for (int l = 0; l < ev.n_layer; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    for (size_t id = 0; id < tensors.size(); ++id) {
      const std::string& name = tensors[id].name;
      if (name == blk + "ffn_gate_inp.weight") routers[l] = static_cast<model::TensorId>(id);
      for (const char* part :
           {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
        if (name == blk + part)
          expert_bytes[l] += tensors[id].n_bytes / static_cast<uint64_t>(ev.n_expert);
      }
    }
    if (routers[l] < 0)
      return invalid_argument("layer " + std::to_string(l) + " has no ffn_gate_inp router");
  }
  HYPURA_ASSIGN_OR_RETURN(auto mmap, tiers::MmapProvider::open(file));
  RouterSwap provider(*mmap, routers);
  HYPURA_RETURN_IF_ERROR(run_pass(model, provider, tokens));
  std::vector<std::vector<int32_t>> truth(static_cast<size_t>(ev.n_layer));  // (n_tokens * k) each
  for (int l = 0; l < ev.n_layer; ++l) truth[l] = provider.routes(l);
  const size_t k = static_cast<size_t>(ev.n_expert_used);
  const auto token_ids = [&](const std::vector<int32_t>& r, size_t t) {
    return std::span(r).subspan(t * k, k);
  };

  for (int l = 0; l + 1 < ev.n_layer; ++l) {
    provider.swap_at(l);
    HYPURA_RETURN_IF_ERROR(run_pass(model, provider, tokens)
                               .with_context("router predictor, layer " + std::to_string(l)));
    const std::vector<int32_t>& pred = provider.routes(l);
    for (size_t t = 0; t < tokens.size(); ++t) {
      score(ev.router, token_ids(pred, t), token_ids(truth[l + 1], t), expert_bytes[l + 1]);
    }
  }
  // Co-activation, online: predict token t from the statistics of tokens before it.
  experts::CoactivationStats stats(ev.n_layer, ev.n_expert);
  std::vector<int32_t> a, p;
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int l = 0; l + 1 < ev.n_layer; ++l) {
      const auto sel = token_ids(truth[l], t);
      a.assign(sel.begin(), sel.end());
      std::sort(a.begin(), a.end());
      a.erase(std::unique(a.begin(), a.end()), a.end());
      stats.predict(l, a, static_cast<int>(k), 0.5, &p);
      score(ev.coact, p, token_ids(truth[l + 1], t), expert_bytes[l + 1]);
    }
    for (int l = 0; l < ev.n_layer; ++l)
      stats.observe(l, token_ids(truth[l], t), static_cast<int>(k));
  }
  return ev;
}

}  // namespace hypura::eval
