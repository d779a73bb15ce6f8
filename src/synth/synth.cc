// Writes a synthetic model: llama.cpp's metadata keys for the architecture, the copied
// tokenizer, then the planned tensors streamed through GgufWriter in constant memory.
#include "synth/synth.h"

#include "gguf/writer.h"

namespace hypura::synth {
namespace {

struct ArchDefaults {
  float rms_eps;
  double rope_freq_base;
};

ArchDefaults arch_defaults(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return {1e-5f, 10000.0};
    case Arch::kDeepseek2:
      return {1e-6f, 10000.0};
    case Arch::kMixtral:
    case Arch::kGlm4Moe:
      return {1e-5f, 1e6};
    case Arch::kGptOss:
      return {1e-5f, 150000.0};
    default:
      return {1e-6f, 1e6};  // qwen2, qwen3, qwen3moe, gemma3
  }
}

void add_general(gguf::GgufWriter& w, const SynthSpec& spec) {
  w.add_string("general.architecture", arch_gguf_name(spec.arch));
  w.add_string("general.type", "model");
  w.add_string("general.name", spec.name);
  w.add_u32("general.file_type", mix_file_type(spec.mix));
  w.add_u32("general.quantization_version", 2);
}

void add_u32(gguf::GgufWriter& w, const std::string& key, int64_t v) {
  w.add_u32(key, static_cast<uint32_t>(v));
}

// deepseek2 as llama.cpp's converter writes it: attention as MQA over the latent
// (head_count_kv 1, key_length kv_lora_rank + rope dims, value_length kv_lora_rank), the
// per-head sizes in the *_mla keys, routing and YaRN keys.
void add_deepseek2(gguf::GgufWriter& w, const std::string& a, const Shape& s) {
  const Mla& m = s.mla;
  add_u32(w, a + "vocab_size", s.n_vocab);
  add_u32(w, a + "leading_dense_block_count", s.n_dense_lead);
  add_u32(w, a + "attention.q_lora_rank", m.q_lora_rank);
  add_u32(w, a + "attention.kv_lora_rank", m.kv_lora_rank);
  add_u32(w, a + "attention.key_length", m.kv_lora_rank + s.n_rot);
  add_u32(w, a + "attention.value_length", m.kv_lora_rank);
  add_u32(w, a + "attention.key_length_mla", s.head_dim);
  add_u32(w, a + "attention.value_length_mla", m.v_head_dim);
  add_u32(w, a + "expert_feed_forward_length", s.n_ff_exp);
  add_u32(w, a + "expert_shared_count", s.n_expert_shared);
  w.add_f32(a + "expert_weights_scale", static_cast<float>(s.expert_weights_scale));
  if (m.weights_norm) w.add_bool(a + "expert_weights_norm", true);
  add_u32(w, a + "expert_gating_func", m.sigmoid ? 2 : 1);  // llama.cpp: 1 softmax, 2 sigmoid
  if (m.n_group > 0) {
    add_u32(w, a + "expert_group_count", m.n_group);
    add_u32(w, a + "expert_group_used_count", m.n_group_used);
  }
  add_u32(w, a + "rope.dimension_count", s.n_rot);
  if (m.yarn_factor > 0.0f) {
    w.add_string(a + "rope.scaling.type", "yarn");
    w.add_f32(a + "rope.scaling.factor", m.yarn_factor);
    add_u32(w, a + "rope.scaling.original_context_length", m.yarn_orig_ctx);
    w.add_f32(a + "rope.scaling.yarn_log_multiplier", 0.1f * m.yarn_mscale_all_dim);
  }
}

// glm4moe's keys, as convert_hf_to_gguf.py writes them for GLM-4.5.
void add_glm4moe(gguf::GgufWriter& w, const std::string& a, const Shape& s) {
  add_u32(w, a + "rope.dimension_count", s.n_rot);
  add_u32(w, a + "expert_shared_count", s.n_expert_shared);
  add_u32(w, a + "leading_dense_block_count", s.n_dense_lead);
  add_u32(w, a + "expert_gating_func", 2);  // sigmoid
  w.add_f32(a + "expert_weights_scale", static_cast<float>(s.expert_weights_scale));
  w.add_bool(a + "expert_weights_norm", true);
  add_u32(w, a + "nextn_predict_layers", s.n_nextn);
}

// <arch>.* hyperparameters under the names llama.cpp's loader reads (llama-arch.cpp).
void add_hparams(gguf::GgufWriter& w, const SynthSpec& spec) {
  const Shape& s = spec.shape;
  const Arch arch = spec.arch;
  const std::string a = std::string(arch_gguf_name(arch)) + ".";
  const ArchDefaults d = arch_defaults(arch);
  add_u32(w, a + "context_length", s.n_ctx);
  add_u32(w, a + "embedding_length", s.n_embd);
  add_u32(w, a + "block_count", s.n_layer + s.n_nextn);
  add_u32(w, a + "feed_forward_length", s.n_ff);
  add_u32(w, a + "attention.head_count", s.n_head);
  add_u32(w, a + "attention.head_count_kv", arch == Arch::kDeepseek2 ? 1 : s.n_head_kv);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", d.rms_eps);
  w.add_f32(a + "rope.freq_base",
            static_cast<float>(s.rope_freq_base > 0 ? s.rope_freq_base : d.rope_freq_base));
  if (arch == Arch::kDeepseek2) add_deepseek2(w, a, s);
  const bool explicit_head_dim = arch == Arch::kQwen3 || arch == Arch::kQwen3Moe ||
                                 arch == Arch::kGemma3 || arch == Arch::kGptOss ||
                                 arch == Arch::kGlm4Moe || s.head_dim * s.n_head != s.n_embd;
  if (explicit_head_dim && arch != Arch::kDeepseek2) {
    add_u32(w, a + "attention.key_length", s.head_dim);
    add_u32(w, a + "attention.value_length", s.head_dim);
  }
  if (arch == Arch::kLlama || arch == Arch::kMixtral) {
    add_u32(w, a + "rope.dimension_count", s.head_dim);
    add_u32(w, a + "vocab_size", s.n_vocab);
  }
  if (arch_is_moe(arch)) {
    add_u32(w, a + "expert_count", s.n_expert);
    add_u32(w, a + "expert_used_count", s.n_expert_used);
  }
  if (arch == Arch::kQwen3Moe || arch == Arch::kGptOss || arch == Arch::kGlm4Moe)
    add_u32(w, a + "expert_feed_forward_length", s.n_ff_exp);
  if (arch == Arch::kGptOss) {
    // Even layers slide over the last n_swa positions (llama.cpp's default pattern 2);
    // YaRN stretches the 4096 trained positions 32 times, as the released models do.
    add_u32(w, a + "attention.sliding_window", s.n_swa > 0 ? s.n_swa : 128);
    w.add_string(a + "rope.scaling.type", "yarn");
    w.add_f32(a + "rope.scaling.factor", 32.0f);
    add_u32(w, a + "rope.scaling.original_context_length", 4096);
  }
  if (arch == Arch::kGlm4Moe) add_glm4moe(w, a, s);
  if (arch == Arch::kGemma3) {
    // Gemma 3: 5 local (sliding window) layers per global one; local rope base 10000.
    add_u32(w, a + "attention.sliding_window", std::min<int64_t>(512, s.n_ctx));
    add_u32(w, a + "attention.sliding_window_pattern", 6);
    w.add_f32(a + "rope.freq_base_swa", 10000.0f);
  }
}

}  // namespace

Status write_model(const SynthSpec& spec, const Vocab& vocab, const std::string& path,
                   const std::function<void(uint64_t, uint64_t)>& progress) {
  if (spec.shape.n_vocab != vocab.n_vocab) {
    return invalid_argument("spec n_vocab " + std::to_string(spec.shape.n_vocab) +
                            " != vocabulary size " + std::to_string(vocab.n_vocab));
  }
  gguf::GgufWriter writer;
  add_general(writer, spec);
  add_hparams(writer, spec);
  for (const auto& [key, value] : vocab.entries) {
    if (key != "tokenizer.chat_template" || spec.chat_template.empty())
      writer.add_metadata(key, value);
  }
  if (!spec.chat_template.empty()) writer.add_string("tokenizer.chat_template", spec.chat_template);

  std::vector<TensorPlan> tensors = plan_tensors(spec);
  if (spec.header_only) {
    for (const TensorPlan& t : tensors) writer.add_tensor(t.name, t.type, t.ne);
    return writer.write_header_only(path).with_context(path);
  }
  std::vector<TensorBytes> bytes;  // one generator per tensor, same order
  bytes.reserve(tensors.size());
  for (const TensorPlan& t : tensors) {
    writer.add_tensor(t.name, t.type, t.ne);
    bytes.emplace_back(t.type, t.values, tensor_seed(spec.seed, t.name));
  }
  auto fill = [&bytes](size_t index, uint64_t offset, std::span<uint8_t> out) {
    bytes[index].fill(offset, out);
    return Status::ok();
  };
  return writer.write(path, fill, 16 << 20, progress).with_context(path);
}

}  // namespace hypura::synth
