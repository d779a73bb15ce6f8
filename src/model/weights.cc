#include "model/weights.h"

#include <algorithm>
#include <string>

#include "gguf/gguf.h"

namespace hypura::model {
namespace {

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "(";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + ")";
}

// Looks tensors up by name and checks their ggml shapes (ne order).
class Finder {
 public:
  Finder(const gguf::GgufFile& file) : file_(file) {}

  Status status() const { return status_; }

  TensorId require(const std::string& name, std::vector<int64_t> ne) {
    TensorId id = lookup(name, ne);
    if (id == kNone && status_.is_ok()) {
      status_ = not_found("tensor '" + name + "' is missing (architecture '" +
                          file_.architecture() + "')");
    }
    return id;
  }
  TensorId optional(const std::string& name, std::vector<int64_t> ne) { return lookup(name, ne); }
  // Norm weights and biases are read as float arrays: they must be stored as F32.
  TensorId require_f32(const std::string& name, std::vector<int64_t> ne) {
    return check_f32(name, require(name, std::move(ne)));
  }
  TensorId optional_f32(const std::string& name, std::vector<int64_t> ne) {
    return check_f32(name, optional(name, std::move(ne)));
  }

 private:
  TensorId check_f32(const std::string& name, TensorId id) {
    if (id != kNone && file_.tensors()[id].type != gguf::GgmlType::F32 && status_.is_ok()) {
      status_ = unsupported("tensor '" + name + "' is " +
                            gguf::type_name(file_.tensors()[id].type) + "; expected F32");
    }
    return id;
  }

  TensorId lookup(const std::string& name, const std::vector<int64_t>& ne) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (t == nullptr) return kNone;
    std::vector<int64_t> got = t->ne;
    while (got.size() > ne.size() && got.back() == 1) got.pop_back();
    if (got != ne && status_.is_ok()) {
      status_ = corrupt("tensor '" + name + "' has shape " + shape_str(t->ne) + ", expected " +
                        shape_str(ne));
    }
    return static_cast<TensorId>(t - file_.tensors().data());
  }

  const gguf::GgufFile& file_;
  Status status_;
};

bool has_qk_norm(Arch a) {
  return a == Arch::kQwen3 || a == Arch::kQwen3Moe || a == Arch::kGemma3;
}

// deepseek2: low-rank q (or attn_q when q_lora_rank is 0), the latent kv projection with
// its rope part, and attn_kv_b split per head into attn_k_b (transposed) and attn_v_b.
void find_mla(Finder& f, const HParams& hp, const std::string& p, LayerWeights& w) {
  const int64_t e = hp.n_embd, h = hp.n_head, rank = hp.kv_lora_rank;
  if (hp.q_lora_rank > 0) {
    w.wq_a = f.require(p + "attn_q_a.weight", {e, hp.q_lora_rank});
    w.q_a_norm = f.require_f32(p + "attn_q_a_norm.weight", {hp.q_lora_rank});
    w.wq_b = f.require(p + "attn_q_b.weight", {hp.q_lora_rank, h * hp.head_dim_mla});
  } else {
    w.wq = f.require(p + "attn_q.weight", {e, h * hp.head_dim_mla});
  }
  w.wkv_a = f.require(p + "attn_kv_a_mqa.weight", {e, rank + hp.n_rot});
  w.kv_a_norm = f.require_f32(p + "attn_kv_a_norm.weight", {rank});
  w.wk_b = f.require(p + "attn_k_b.weight", {hp.qk_nope(), rank, h});
  w.wv_b = f.require(p + "attn_v_b.weight", {rank, hp.head_dim_v_mla, h});
  w.wo = f.require(p + "attn_output.weight", {h * hp.head_dim_v_mla, e});
}

void find_attention(Finder& f, const HParams& hp, const std::string& p, LayerWeights& w) {
  const int64_t e = hp.n_embd;
  w.attn_norm = f.require_f32(p + "attn_norm.weight", {e});
  if (hp.is_mla()) return find_mla(f, hp, p, w);
  w.wq = f.require(p + "attn_q.weight", {e, hp.q_width()});
  w.wk = f.require(p + "attn_k.weight", {e, hp.k_width()});
  w.wv = f.require(p + "attn_v.weight", {e, hp.v_width()});
  w.wo = f.require(p + "attn_output.weight", {hp.n_head * hp.head_dim_v, e});
  if (hp.arch == Arch::kQwen2 || hp.arch == Arch::kGptOss) {
    w.bq = f.require_f32(p + "attn_q.bias", {hp.q_width()});
    w.bk = f.require_f32(p + "attn_k.bias", {hp.k_width()});
    w.bv = f.require_f32(p + "attn_v.bias", {hp.v_width()});
  }
  if (hp.arch == Arch::kGptOss) {
    w.bo = f.require_f32(p + "attn_output.bias", {e});
    w.attn_sinks = f.require_f32(p + "attn_sinks.weight", {hp.n_head});
  }
  if (has_qk_norm(hp.arch)) {
    w.q_norm = f.require_f32(p + "attn_q_norm.weight", {hp.head_dim});
    w.k_norm = f.require_f32(p + "attn_k_norm.weight", {hp.head_dim});
  }
  if (hp.arch == Arch::kGlm4Moe) {  // GLM-4.5: biases; q/k norms in some variants
    w.bq = f.optional_f32(p + "attn_q.bias", {hp.q_width()});
    w.bk = f.optional_f32(p + "attn_k.bias", {hp.k_width()});
    w.bv = f.optional_f32(p + "attn_v.bias", {hp.v_width()});
    w.q_norm = f.optional_f32(p + "attn_q_norm.weight", {hp.head_dim});
    w.k_norm = f.optional_f32(p + "attn_k_norm.weight", {hp.head_dim});
  }
  if (hp.arch == Arch::kGemma3) {
    w.post_attn_norm = f.require_f32(p + "post_attention_norm.weight", {e});
  }
}

void find_ffn(Finder& f, const HParams& hp, int64_t il, const std::string& p, LayerWeights& w) {
  const int64_t e = hp.n_embd;
  // gpt-oss and glm4moe name their FFN's input norm post_attention_norm (it follows the
  // attention).
  const bool post = hp.arch == Arch::kGptOss || hp.arch == Arch::kGlm4Moe;
  w.ffn_norm = f.require_f32(p + (post ? "post_attention_norm.weight" : "ffn_norm.weight"), {e});
  if (hp.arch == Arch::kGemma3) w.post_ffn_norm = f.require_f32(p + "post_ffw_norm.weight", {e});
  if (hp.is_moe_layer(il)) {
    const int64_t ffe = hp.n_ff_expert, ne = hp.n_expert;
    w.ffn_router = f.require(p + "ffn_gate_inp.weight", {e, ne});
    w.ffn_exp_probs_b = f.optional_f32(p + "exp_probs_b.bias", {ne});
    w.ffn_gate_exps = f.require(p + "ffn_gate_exps.weight", {e, ffe, ne});
    w.ffn_up_exps = f.require(p + "ffn_up_exps.weight", {e, ffe, ne});
    w.ffn_down_exps = f.require(p + "ffn_down_exps.weight", {ffe, e, ne});
    if (hp.n_expert_shared > 0) {
      const int64_t ffs = hp.n_ff_shexp();
      w.ffn_gate_shexp = f.require(p + "ffn_gate_shexp.weight", {e, ffs});
      w.ffn_up_shexp = f.require(p + "ffn_up_shexp.weight", {e, ffs});
      w.ffn_down_shexp = f.require(p + "ffn_down_shexp.weight", {ffs, e});
    }
    if (hp.arch == Arch::kGptOss) {
      w.ffn_router_b = f.require_f32(p + "ffn_gate_inp.bias", {ne});
      w.ffn_gate_exps_b = f.require_f32(p + "ffn_gate_exps.bias", {ffe, ne});
      w.ffn_up_exps_b = f.require_f32(p + "ffn_up_exps.bias", {ffe, ne});
      w.ffn_down_exps_b = f.require_f32(p + "ffn_down_exps.bias", {e, ne});
    }
    return;
  }
  w.ffn_gate = f.require(p + "ffn_gate.weight", {e, hp.n_ff});
  w.ffn_up = f.require(p + "ffn_up.weight", {e, hp.n_ff});
  w.ffn_down = f.require(p + "ffn_down.weight", {hp.n_ff, e});
}

}  // namespace

Result<WeightMap> build_weight_map(const gguf::GgufFile& file, const HParams& hp) {
  Finder f(file);
  WeightMap m;
  m.token_embd = f.require("token_embd.weight", {hp.n_embd, hp.n_vocab});
  m.output_norm = f.require_f32("output_norm.weight", {hp.n_embd});
  m.output = f.optional("output.weight", {hp.n_embd, hp.n_vocab});
  if (m.output == kNone) m.output = m.token_embd;  // tied embeddings
  m.rope_freqs = f.optional("rope_freqs.weight", {hp.n_rot / 2});
  if ((hp.n_expert == 0 || hp.n_layer_dense_lead > 0) && hp.n_ff <= 0) {
    return corrupt(hp.arch_name + ".feed_forward_length is missing or 0");
  }
  if (hp.n_expert > 0 && hp.n_ff_expert <= 0) {
    return corrupt(hp.arch_name + ".expert_feed_forward_length is missing or 0");
  }
  m.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    find_attention(f, hp, p, m.layers[il]);
    find_ffn(f, hp, il, p, m.layers[il]);
    HYPURA_RETURN_IF_ERROR(f.status());
  }
  HYPURA_RETURN_IF_ERROR(f.status());
  return m;
}

std::vector<TensorId> layer_tensor_ids(const WeightMap& w, int64_t il) {
  std::vector<TensorId> ids;
  const auto add = [&](TensorId id) {
    if (id != kNone && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  if (il < 0) {
    for (TensorId id : {w.token_embd, w.output_norm, w.output, w.rope_freqs}) add(id);
    return ids;
  }
  const LayerWeights& l = w.layers[static_cast<size_t>(il)];
  for (TensorId id : {l.attn_norm,
                      l.wq,
                      l.wk,
                      l.wv,
                      l.wo,
                      l.bq,
                      l.bk,
                      l.bv,
                      l.q_norm,
                      l.k_norm,
                      l.post_attn_norm,
                      l.wq_a,
                      l.q_a_norm,
                      l.wq_b,
                      l.wkv_a,
                      l.kv_a_norm,
                      l.wk_b,
                      l.wv_b,
                      l.bo,
                      l.attn_sinks,
                      l.ffn_norm,
                      l.post_ffn_norm,
                      l.ffn_gate,
                      l.ffn_up,
                      l.ffn_down,
                      l.ffn_router,
                      l.ffn_router_b,
                      l.ffn_gate_exps,
                      l.ffn_up_exps,
                      l.ffn_down_exps,
                      l.ffn_exp_probs_b,
                      l.ffn_gate_shexp,
                      l.ffn_up_shexp,
                      l.ffn_down_shexp,
                      l.ffn_gate_exps_b,
                      l.ffn_up_exps_b,
                      l.ffn_down_exps_b}) {
    add(id);
  }
  return ids;
}

}  // namespace hypura::model
