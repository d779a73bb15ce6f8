#include "model/hparams.h"

#include <cmath>
#include <string_view>

#include "gguf/gguf.h"
#include "model/routing.h"

namespace hypura::model {
namespace {

struct ArchEntry {
  const char* name;
  Arch arch;
};
constexpr ArchEntry kArchs[] = {
    {"llama", Arch::kLlama},    {"qwen2", Arch::kQwen2},       {"qwen3", Arch::kQwen3},
    {"gemma3", Arch::kGemma3},  {"qwen3moe", Arch::kQwen3Moe}, {"deepseek2", Arch::kDeepseek2},
    {"gpt-oss", Arch::kGptOss}, {"glm4moe", Arch::kGlm4Moe},
};

// Reads "<arch>.<key>" as an integer; arrays (per-layer values) must be uniform.
class KeyReader {
 public:
  KeyReader(const gguf::Metadata& md, std::string arch) : md_(md), arch_(std::move(arch)) {}

  std::string key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }

  Result<int64_t> require_int(std::string_view suffix) const {
    auto v = find_int(suffix);
    if (!v.is_ok()) return v.status();
    if (!v.value()) return not_found("GGUF metadata key '" + key(suffix) + "' is missing");
    return *v.value();
  }
  // nullopt when missing; error when present but not a usable integer.
  Result<std::optional<int64_t>> find_int(std::string_view suffix) const {
    const gguf::Value* v = md_.find(key(suffix));
    if (v == nullptr) return std::optional<int64_t>();
    if (const auto* arr = v->as_array()) return uniform_array(suffix, *arr);
    auto i = v->as_i64();
    if (!i || *i < 0) return corrupt("GGUF metadata key '" + key(suffix) + "' is not a count");
    return std::optional<int64_t>(*i);
  }
  int64_t int_or(std::string_view suffix, int64_t fallback, Status* st) const {
    auto v = find_int(suffix);
    if (!v.is_ok()) {
      *st = v.status();
      return fallback;
    }
    return v.value() ? *v.value() : fallback;
  }
  float float_or(std::string_view suffix, float fallback) const {
    auto v = md_.get_f64(key(suffix));
    return v ? static_cast<float>(*v) : fallback;
  }

 private:
  Result<std::optional<int64_t>> uniform_array(std::string_view suffix,
                                               const std::vector<gguf::Value>& arr) const {
    if (arr.empty()) return corrupt("GGUF metadata key '" + key(suffix) + "' is an empty array");
    auto first = arr[0].as_i64();
    for (const auto& e : arr) {
      if (!e.as_i64() || e.as_i64() != first) {
        return unsupported("GGUF metadata key '" + key(suffix) +
                           "' varies per layer, which is not supported");
      }
    }
    return std::optional<int64_t>(*first);
  }

  const gguf::Metadata& md_;
  std::string arch_;
};

Status check_positive(const HParams& hp) {
  struct Field {
    const char* name;
    int64_t value;
  };
  const Field fields[] = {{"n_embd", hp.n_embd},          {"n_layer", hp.n_layer},
                          {"n_head", hp.n_head},          {"n_head_kv", hp.n_head_kv},
                          {"head_dim", hp.head_dim},      {"n_vocab", hp.n_vocab},
                          {"n_ctx_train", hp.n_ctx_train}};
  for (const auto& f : fields) {
    if (f.value <= 0) return corrupt(std::string("hyperparameter ") + f.name + " must be > 0");
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return corrupt("n_head (" + std::to_string(hp.n_head) + ") is not a multiple of n_head_kv (" +
                   std::to_string(hp.n_head_kv) + ")");
  }
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    return corrupt("rope.dimension_count " + std::to_string(hp.n_rot) + " does not fit head_dim " +
                   std::to_string(hp.head_dim));
  }
  if (hp.n_expert > 0 && (hp.n_expert_used <= 0 || hp.n_expert_used > hp.n_expert)) {
    return corrupt("expert_used_count must be in 1..expert_count");
  }
  if (hp.n_layer > 4096 || hp.n_head > 4096 || hp.head_dim > 4096 || hp.n_expert > 4096) {
    return corrupt("hyperparameters out of range (n_layer, n_head, head_dim or n_expert > 4096)");
  }
  return Status::ok();
}

int64_t vocab_rows(const gguf::GgufFile& file) {
  const gguf::TensorInfo* t = file.find_tensor("output.weight");
  if (t == nullptr) t = file.find_tensor("token_embd.weight");
  return (t != nullptr && t->ne.size() >= 2) ? t->ne[1] : 0;
}

void set_arch_specifics(HParams& hp, const KeyReader& keys, const gguf::Metadata& md) {
  // qwen2/qwen3/gemma3 rotate NeoX-style; llama and deepseek2 pairwise.
  hp.rope_neox = hp.arch != Arch::kLlama && hp.arch != Arch::kDeepseek2;
  if (hp.arch == Arch::kGemma3) {
    hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
    hp.rope_freq_base_swa = keys.float_or("rope.freq_base_swa", 10000.0f);
    hp.rope_freq_scale_swa = 1.0f;
    // Gemma3 27B uses query_pre_attn_scalar = n_embd / n_head; the others head_dim.
    const bool is_27b = hp.n_layer == 62;
    const float q_dim =
        is_27b ? static_cast<float>(hp.n_embd / hp.n_head) : static_cast<float>(hp.head_dim);
    hp.q_scale = 1.0f / std::sqrt(q_dim);
    hp.kq_scale = 1.0f;
  } else {
    hp.kq_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  }
  if (hp.arch == Arch::kGptOss) {
    hp.expert_act = FfnAct::kSwigluOai;
    hp.kq_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_rot));
    hp.rope_freq_base_swa = keys.float_or("rope.freq_base_swa", hp.rope_freq_base);
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
  }
  (void)md;
}

// The MoE routing keys llama.cpp reads (model/routing.h); mixtral and qwen3moe ignore the
// file and always renormalise softmax weights; gpt-oss always softmaxes its chosen logits.
Status read_routing(HParams& hp, const KeyReader& keys, const gguf::Metadata& md) {
  Status st;
  const int64_t gating = keys.int_or("expert_gating_func", 0, &st);
  HYPURA_RETURN_IF_ERROR(st);
  switch (gating) {
    case 0:  // none: the architecture's own
      if (hp.arch == Arch::kGlm4Moe) hp.expert_gating = ExpertGating::kSigmoid;
      break;
    case 1:
      hp.expert_gating = ExpertGating::kSoftmax;
      break;
    case 2:
      hp.expert_gating = ExpertGating::kSigmoid;
      break;
    case 3:
      hp.expert_gating = ExpertGating::kSoftmaxWeight;
      break;
    default:
      return unsupported(keys.key("expert_gating_func") + " " + std::to_string(gating) +
                         " is not supported (1 softmax, 2 sigmoid, 3 softmax over the chosen)");
  }
  hp.expert_weights_norm = md.get_bool(keys.key("expert_weights_norm")).value_or(false);
  const float scale = keys.float_or("expert_weights_scale", 0.0f);
  hp.expert_weights_scale = scale == 0.0f ? 1.0f : scale;  // 0: not scaled, as llama.cpp
  hp.n_expert_groups = keys.int_or("expert_group_count", 0, &st);
  hp.n_group_used = keys.int_or("expert_group_used_count", 0, &st);
  hp.n_expert_shared = keys.int_or("expert_shared_count", 0, &st);
  hp.n_layer_dense_lead = keys.int_or("leading_dense_block_count", 0, &st);
  HYPURA_RETURN_IF_ERROR(st);
  if (hp.arch == Arch::kLlama || hp.arch == Arch::kQwen3Moe) {
    hp.expert_gating = ExpertGating::kSoftmax;
    hp.expert_weights_norm = true;
    hp.expert_weights_scale = 1.0f;
    hp.n_expert_groups = hp.n_group_used = hp.n_expert_shared = hp.n_layer_dense_lead = 0;
  }
  if (hp.arch == Arch::kGptOss) {  // llama.cpp's build_moe_ffn call for it, whatever the file
    hp.expert_gating = ExpertGating::kSoftmaxWeight;
    hp.expert_weights_norm = false;
  }
  if (hp.n_layer_dense_lead > hp.n_layer) {
    return corrupt(keys.key("leading_dense_block_count") + " exceeds the block count");
  }
  return check_routing(hp);
}

// rope.scaling.*: linear divides positions by the factor; YaRN (llama.cpp's context
// setup) also sets ext_factor 1 and the attention factor that cancels ggml's own mscale.
Status read_rope_scaling(HParams& hp, const KeyReader& keys, const gguf::Metadata& md) {
  auto scaling = md.get_string(keys.key("rope.scaling.type"));
  const std::string type = scaling ? *scaling : "";
  const float factor = keys.float_or("rope.scaling.factor", 0.0f);
  if (type != "linear" && type != "yarn" && type != "none" && type != "") {
    return unsupported("rope scaling type '" + type + "' is not supported (linear, yarn)");
  }
  Status st;
  hp.n_ctx_orig_yarn = keys.int_or("rope.scaling.original_context_length", hp.n_ctx_train, &st);
  HYPURA_RETURN_IF_ERROR(st);
  hp.yarn_log_mul = keys.float_or("rope.scaling.yarn_log_multiplier", 0.0f);
  // deepseek2 files store 0.1 * mscale_all_dim; llama.cpp's loader divides it back out.
  if (hp.arch == Arch::kDeepseek2) hp.yarn_log_mul /= 0.1f;
  if ((type == "linear" || type == "yarn") && factor > 0.0f) hp.rope_freq_scale = 1.0f / factor;
  if (type == "none") hp.rope_freq_scale = 1.0f;
  hp.yarn_beta_fast = keys.float_or("rope.scaling.yarn_beta_fast", 32.0f);
  hp.yarn_beta_slow = keys.float_or("rope.scaling.yarn_beta_slow", 1.0f);
  hp.yarn_ext_factor = keys.float_or("rope.scaling.yarn_ext_factor", type == "yarn" ? 1.0f : 0.0f);
  hp.yarn_attn_factor = keys.float_or("rope.scaling.yarn_attn_factor", 1.0f);
  if (hp.yarn_ext_factor != 0.0f) {
    const auto mscale = [](float scale, float m) {
      return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f;
    };
    const float f = 1.0f / hp.rope_freq_scale;
    if (hp.yarn_log_mul != 0.0f) {
      // DeepSeek-V2 configs give mscale == mscale_all_dim; others leave mscale at 1.
      const float all_dims = hp.yarn_log_mul;
      const float m = hp.arch == Arch::kDeepseek2 && all_dims != 1.0f ? all_dims : 1.0f;
      hp.yarn_attn_factor = mscale(f, m) / mscale(f, all_dims);
    } else {
      hp.yarn_attn_factor = mscale(f, 1.0f);
    }
    // ggml's YaRN rope multiplies by 1 + 0.1 ln(factor) itself: cancel it.
    hp.yarn_attn_factor /= 1.0f + 0.1f * std::log(f);
  }
  hp.yarn_attn_factor *= keys.float_or("rope.scaling.attn_factor", 1.0f);
  return Status::ok();
}

// deepseek2's multi-head latent attention. Files from llama.cpp's current converter store
// key_length = kv_lora_rank + rope dims, value_length = kv_lora_rank and the per-head sizes
// in the *_mla keys, with attn_kv_b split into attn_k_b / attn_v_b.
Status read_mla(HParams& hp, const KeyReader& keys) {
  Status st;
  hp.q_lora_rank = keys.int_or("attention.q_lora_rank", 0, &st);
  hp.kv_lora_rank = keys.int_or("attention.kv_lora_rank", 0, &st);
  hp.head_dim_mla = keys.int_or("attention.key_length_mla", 0, &st);
  hp.head_dim_v_mla = keys.int_or("attention.value_length_mla", 0, &st);
  HYPURA_RETURN_IF_ERROR(st);
  hp.rms_eps = keys.float_or("attention.layer_norm_rms_epsilon", 1e-6f);
  if (hp.kv_lora_rank <= 0) return corrupt(keys.key("attention.kv_lora_rank") + " is missing or 0");
  if (hp.head_dim_mla == 0 || hp.head_dim_v_mla == 0) {
    return unsupported(
        "deepseek2 file without " + keys.key("attention.key_length_mla") +
        " (an older conversion with the combined attn_kv_b); re-convert it with a current "
        "llama.cpp, which splits attn_kv_b into attn_k_b / attn_v_b for the latent KV cache");
  }
  if (hp.head_dim != hp.kv_lora_rank + hp.n_rot || hp.head_dim_v != hp.kv_lora_rank ||
      hp.n_head_kv != 1) {
    return corrupt("deepseek2 attention.key_length / value_length / head_count_kv (" +
                   std::to_string(hp.head_dim) + " / " + std::to_string(hp.head_dim_v) + " / " +
                   std::to_string(hp.n_head_kv) + ") do not describe the latent cache of rank " +
                   std::to_string(hp.kv_lora_rank));
  }
  if (hp.head_dim_mla <= hp.n_rot) {
    return corrupt("deepseek2 " + keys.key("attention.key_length_mla") + " " +
                   std::to_string(hp.head_dim_mla) + " leaves no un-rotated dims");
  }
  // llama.cpp pre-scales the softmax by the YaRN magnitude, squared (q and k both carry it).
  const float ln_f = std::log(1.0f / hp.rope_freq_scale);
  const float attn_factor_org = hp.yarn_attn_factor * (1.0f + 0.1f * ln_f);
  const float m = attn_factor_org * (1.0f + 0.1f * hp.yarn_log_mul * ln_f);
  hp.kq_scale = m * m / std::sqrt(static_cast<float>(hp.head_dim_mla));
  return Status::ok();
}

}  // namespace

const char* supported_architectures() {
  return "llama (incl. Mistral and Mixtral-style MoE), qwen2, qwen3, gemma3, qwen3moe, deepseek2, "
         "gpt-oss, glm4moe";
}

const char* arch_name(Arch arch) {
  for (const auto& e : kArchs) {
    if (e.arch == arch) return e.name;
  }
  return "?";
}

Result<HParams> read_hparams(const gguf::GgufFile& file) {
  HParams hp;
  hp.arch_name = file.architecture();
  bool known = false;
  for (const auto& e : kArchs) {
    if (hp.arch_name == e.name) {
      hp.arch = e.arch;
      known = true;
    }
  }
  if (!known) {
    return unsupported("architecture '" + hp.arch_name +
                       "' is not supported; supported: " + supported_architectures());
  }
  const gguf::Metadata& md = file.metadata();
  KeyReader keys(md, hp.arch_name);
  Status st;
  HYPURA_ASSIGN_OR_RETURN(hp.n_embd, keys.require_int("embedding_length"));
  HYPURA_ASSIGN_OR_RETURN(hp.n_layer, keys.require_int("block_count"));
  // NextN/MTP layers follow the model's own (glm4moe); llama.cpp's forward pass skips them.
  hp.n_layer_nextn = keys.int_or("nextn_predict_layers", 0, &st);
  if (hp.n_layer_nextn >= hp.n_layer) {
    return corrupt(keys.key("nextn_predict_layers") + " must be below the block count");
  }
  hp.n_layer -= hp.n_layer_nextn;
  HYPURA_ASSIGN_OR_RETURN(hp.n_head, keys.require_int("attention.head_count"));
  hp.n_ctx_train = keys.int_or("context_length", 4096, &st);
  hp.n_head_kv = keys.int_or("attention.head_count_kv", hp.n_head, &st);
  const int64_t default_head_dim = hp.n_head > 0 ? hp.n_embd / hp.n_head : 0;
  hp.head_dim = keys.int_or("attention.key_length", default_head_dim, &st);
  hp.head_dim_v = keys.int_or("attention.value_length", hp.head_dim, &st);
  hp.n_ff = keys.int_or("feed_forward_length", 0, &st);
  hp.n_expert = keys.int_or("expert_count", 0, &st);
  hp.n_expert_used = keys.int_or("expert_used_count", 0, &st);
  hp.n_ff_expert = keys.int_or("expert_feed_forward_length", hp.n_ff, &st);
  hp.n_rot = keys.int_or("rope.dimension_count", hp.head_dim, &st);
  hp.n_swa = keys.int_or("attention.sliding_window", 0, &st);
  // gemma3: five local layers per global one; gpt-oss alternates, local first.
  hp.swa_pattern =
      keys.int_or("attention.sliding_window_pattern", hp.arch == Arch::kGptOss ? 2 : 6, &st);
  HYPURA_RETURN_IF_ERROR(st);
  const bool has_swa = hp.arch == Arch::kGemma3 || hp.arch == Arch::kGptOss;
  if (!has_swa) hp.n_swa = 0;  // others: full attention everywhere
  hp.rms_eps =
      keys.float_or("attention.layer_norm_rms_epsilon", hp.arch == Arch::kGemma3 ? 1e-6f : 1e-5f);
  hp.rope_freq_base = keys.float_or("rope.freq_base", 10000.0f);
  HYPURA_RETURN_IF_ERROR(read_rope_scaling(hp, keys, md));
  hp.n_vocab = vocab_rows(file);
  if ((hp.arch == Arch::kQwen3Moe || hp.arch == Arch::kGptOss || hp.arch == Arch::kGlm4Moe) &&
      hp.n_expert == 0) {
    return corrupt(hp.arch_name + " model without " + keys.key("expert_count"));
  }
  if (hp.arch == Arch::kGptOss && hp.n_swa <= 0) {
    return corrupt("gpt-oss model without " + keys.key("attention.sliding_window"));
  }
  set_arch_specifics(hp, keys, md);
  if (hp.arch == Arch::kDeepseek2) HYPURA_RETURN_IF_ERROR(read_mla(hp, keys));
  HYPURA_RETURN_IF_ERROR(check_positive(hp));
  if (hp.n_expert > 0) HYPURA_RETURN_IF_ERROR(read_routing(hp, keys, md));
  return hp;
}

}  // namespace hypura::model
