#include "scheduler/model_tensors.h"

#include <algorithm>

namespace hypura::scheduler {
namespace {

// "<arch>.<key>" as an integer; arrays (per-layer head counts) give their maximum.
int64_t arch_int(const gguf::Metadata& md, const std::string& arch, const std::string& key,
                 int64_t fallback) {
  const gguf::Value* v = md.find(arch + "." + key);
  if (v == nullptr) return fallback;
  if (auto i = v->as_i64()) return *i;
  if (const auto* arr = v->as_array()) {
    int64_t best = fallback;
    for (const auto& e : *arr) {
      if (auto i = e.as_i64()) best = std::max(best, *i);
    }
    return best;
  }
  return fallback;
}

// Elements of every array in the metadata (nested arrays counted through).
uint64_t array_elements(const gguf::Value& v) {
  const auto* arr = v.as_array();
  if (arr == nullptr) return 0;
  uint64_t n = arr->size();
  for (const auto& e : *arr) n += array_elements(e);
  return n;
}

uint64_t array_size(const gguf::Metadata& md, const char* key) {
  const auto* arr = md.get_array(key);
  return arr != nullptr ? arr->size() : 0;
}

}  // namespace

uint64_t ModelTensors::total_bytes() const {
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.bytes;
  return total;
}

uint64_t ModelTensors::bytes_read_per_token() const {
  double total = 0;
  for (const auto& t : tensors) total += t.access_per_token * static_cast<double>(t.bytes);
  return static_cast<uint64_t>(total);
}

void set_access_frequencies(ModelTensors& m) {
  // Tied embeddings: the token embedding is also the output head, read whole every token.
  bool tied = std::none_of(m.tensors.begin(), m.tensors.end(), [](const TensorDesc& t) {
    return t.role == model::TensorRole::kOutput;
  });
  for (auto& t : m.tensors) {
    if (model::is_moe_expert(t.role) && t.n_expert > 0) {
      int64_t used = m.n_expert_used > 0 ? m.n_expert_used : 1;
      t.access_per_token =
          std::min(1.0, static_cast<double>(used) / static_cast<double>(t.n_expert));
    } else if (t.role == model::TensorRole::kTokenEmbedding && t.row_bytes > 0 && !tied) {
      t.access_per_token =
          static_cast<double>(t.row_bytes) / static_cast<double>(std::max<uint64_t>(t.bytes, 1));
    } else {
      t.access_per_token = 1.0;
    }
  }
}

Result<ModelTensors> model_tensors_from_gguf(const gguf::GgufFile& file) {
  ModelTensors m;
  const gguf::Metadata& md = file.metadata();
  m.architecture = file.architecture();
  m.name = md.get_string("general.name").value_or("");
  const std::string& a = m.architecture;
  m.n_layer = static_cast<int>(arch_int(md, a, "block_count", 0));
  // NextN/MTP layers (glm4moe) come after the model's own, which never run them.
  const int n_nextn = static_cast<int>(arch_int(md, a, "nextn_predict_layers", 0));
  if (n_nextn > 0 && n_nextn < m.n_layer) m.n_layer -= n_nextn;
  m.n_embd = arch_int(md, a, "embedding_length", 0);
  if (m.n_layer <= 0 || m.n_embd <= 0) {
    return corrupt("model metadata lacks " + a + ".block_count or " + a + ".embedding_length");
  }
  m.n_head = arch_int(md, a, "attention.head_count", 1);
  int64_t n_head_kv = arch_int(md, a, "attention.head_count_kv", m.n_head);
  int64_t head_dim =
      arch_int(md, a, "attention.key_length", m.n_embd / std::max<int64_t>(m.n_head, 1));
  int64_t head_dim_v = arch_int(md, a, "attention.value_length", head_dim);
  // Multi-head latent attention (deepseek2) caches one row per position, the latent and
  // k_pe: its values are the key's prefix (model::HParams::kv_per_token).
  const bool latent = arch_int(md, a, "attention.kv_lora_rank", 0) > 0 &&
                      arch_int(md, a, "attention.key_length_mla", 0) > 0;
  m.kv_elements_per_token =
      static_cast<uint64_t>(m.n_layer * n_head_kv * (latent ? head_dim : head_dim + head_dim_v));
  m.n_ctx_train = arch_int(md, a, "context_length", 4096);
  m.n_tokens = array_size(md, "tokenizer.ggml.tokens");
  m.n_merges = array_size(md, "tokenizer.ggml.merges");
  for (const auto& [key, value] : md.entries()) m.metadata_array_elements += array_elements(value);
  m.n_expert = arch_int(md, a, "expert_count", 0);
  m.n_expert_used = arch_int(md, a, "expert_used_count", 0);
  int64_t n_ff = arch_int(md, a, "feed_forward_length", 0);
  int64_t n_ff_exp = arch_int(md, a, "expert_feed_forward_length", 0);
  const auto& infos = file.tensors();
  for (size_t i = 0; i < infos.size(); ++i) {
    const gguf::TensorInfo& ti = infos[i];
    model::TensorClass c = model::classify_tensor(ti.name, a);
    if (c.layer >= m.n_layer) continue;  // a NextN layer's: not placed, loaded or streamed
    TensorDesc t;
    t.name = ti.name;
    t.role = c.role;
    t.layer = c.layer;
    t.bytes = ti.n_bytes;
    t.type = ti.type;
    t.file_index = static_cast<int32_t>(i);
    t.split = ti.file_index;
    t.offset = ti.offset;
    if (model::is_moe_expert(c.role) && ti.ne.size() >= 3) {
      t.n_expert = ti.ne[2];
      if (n_ff_exp == 0) n_ff_exp = std::min(ti.ne[0], ti.ne[1]);
    }
    if (!ti.ne.empty() && ti.ne[0] > 0)
      t.row_bytes = ti.n_bytes / static_cast<uint64_t>(std::max<int64_t>(ti.n_rows(), 1));
    if (ti.ne.size() >= 2) t.n_cols = ti.ne[0];
    if (c.role == model::TensorRole::kTokenEmbedding && ti.ne.size() >= 2) m.n_vocab = ti.ne[1];
    m.tensors.push_back(std::move(t));
  }
  m.n_ff = std::max(n_ff, n_ff_exp * std::max<int64_t>(m.n_expert_used, 1));
  set_access_frequencies(m);
  return m;
}

}  // namespace hypura::scheduler
