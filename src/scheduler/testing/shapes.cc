#include "scheduler/testing/shapes.h"

#include <vector>

namespace hypura::scheduler {
namespace {

using gguf::GgmlType;
using model::TensorRole;
using synth::TensorKind;

struct Builder {
  const ShapeSpec& s;
  ModelTensors m;
  synth::MixModel mix{s.mix,
                      s.architecture == "qwen2"       ? synth::Arch::kQwen2
                      : s.architecture == "qwen3moe"  ? synth::Arch::kQwen3Moe
                      : s.architecture == "deepseek2" ? synth::Arch::kDeepseek2
                      : s.n_expert > 0                ? synth::Arch::kMixtral
                                                      : synth::Arch::kLlama,
                      s.n_layer, s.n_expert, !s.tied_embeddings};

  // llama-quantize's type for the tensor (n_expert > 0: stacked experts).
  GgmlType type(TensorKind kind, int layer, int64_t n_cols, int64_t n_rows,
                int64_t n_expert = 0) const {
    std::vector<int64_t> ne = {n_cols, n_rows};
    if (n_expert > 0) ne.push_back(n_expert);
    return synth::mix_type(mix, kind, layer, ne);
  }

  // A (n_rows x n_cols) matrix, or n_expert of them stacked.
  void add(std::string name, TensorRole role, int layer, TensorKind kind, int64_t n_cols,
           int64_t n_rows, int64_t n_expert = 0) {
    TensorDesc t;
    t.name = std::move(name);
    t.role = role;
    t.layer = layer;
    t.type = type(kind, layer, n_cols, n_rows, n_expert);
    t.row_bytes = gguf::row_bytes(t.type, n_cols);
    t.bytes = t.row_bytes * static_cast<uint64_t>(n_rows) *
              static_cast<uint64_t>(n_expert > 0 ? n_expert : 1);
    t.n_expert = n_expert;
    m.tensors.push_back(std::move(t));
  }
  void add_norm(const std::string& name, TensorRole role, int layer, int64_t n) {
    add(name, role, layer, TensorKind::kNorm, n, 1);
  }

  void attention(int il, const std::string& p) {
    add_norm(p + "attn_norm.weight", TensorRole::kAttnNorm, il, s.n_embd);
    if (s.kv_lora_rank > 0) return mla(il, p);
    int64_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
    add(p + "attn_q.weight", TensorRole::kAttnQ, il, TensorKind::kAttnQ, s.n_embd, s.n_head * hd);
    add(p + "attn_k.weight", TensorRole::kAttnK, il, TensorKind::kAttnK, s.n_embd,
        s.n_head_kv * hd);
    add(p + "attn_v.weight", TensorRole::kAttnV, il, TensorKind::kAttnV, s.n_embd,
        s.n_head_kv * hd);
    add(p + "attn_output.weight", TensorRole::kAttnOutput, il, TensorKind::kAttnOut, s.n_head * hd,
        s.n_embd);
    if (s.qkv_bias) {
      add_norm(p + "attn_q.bias", TensorRole::kAttnBias, il, s.n_head * hd);
      add_norm(p + "attn_k.bias", TensorRole::kAttnBias, il, s.n_head_kv * hd);
      add_norm(p + "attn_v.bias", TensorRole::kAttnBias, il, s.n_head_kv * hd);
    }
  }

  // The latent attention's matrices are all of llama-quantize's default kind (none of
  // its names is attn_v or attn_k).
  void mla(int il, const std::string& p) {
    int64_t qk = s.qk_nope_dim + s.qk_rope_dim;
    const TensorKind q = TensorKind::kAttnQ;
    add(p + "attn_q_a.weight", TensorRole::kAttnQ, il, q, s.n_embd, s.q_lora_rank);
    add_norm(p + "attn_q_a_norm.weight", TensorRole::kAttnQNorm, il, s.q_lora_rank);
    add(p + "attn_q_b.weight", TensorRole::kAttnQ, il, q, s.q_lora_rank, s.n_head * qk);
    add(p + "attn_kv_a_mqa.weight", TensorRole::kAttnK, il, q, s.n_embd,
        s.kv_lora_rank + s.qk_rope_dim);
    add_norm(p + "attn_kv_a_norm.weight", TensorRole::kAttnKNorm, il, s.kv_lora_rank);
    add(p + "attn_kv_b.weight", TensorRole::kAttnV, il, q, s.kv_lora_rank,
        s.n_head * (s.qk_nope_dim + s.v_head_dim));
    add(p + "attn_output.weight", TensorRole::kAttnOutput, il, TensorKind::kAttnOut,
        s.n_head * s.v_head_dim, s.n_embd);
  }

  void ffn(int il, const std::string& p) {
    const TensorKind gate_up = TensorKind::kFfnGateUp, down = TensorKind::kFfnDown;
    add_norm(p + "ffn_norm.weight", TensorRole::kFfnNorm, il, s.n_embd);
    if (s.n_expert == 0 || il < s.n_dense_layers) {
      add(p + "ffn_gate.weight", TensorRole::kFfnGate, il, gate_up, s.n_embd, s.n_ff);
      add(p + "ffn_up.weight", TensorRole::kFfnUp, il, gate_up, s.n_embd, s.n_ff);
      add(p + "ffn_down.weight", TensorRole::kFfnDown, il, down, s.n_ff, s.n_embd);
      return;
    }
    add(p + "ffn_gate_inp.weight", TensorRole::kMoeRouter, il, TensorKind::kRouter, s.n_embd,
        s.n_expert);
    add(p + "ffn_gate_exps.weight", TensorRole::kMoeGateExperts, il, gate_up, s.n_embd, s.n_ff_exp,
        s.n_expert);
    add(p + "ffn_up_exps.weight", TensorRole::kMoeUpExperts, il, gate_up, s.n_embd, s.n_ff_exp,
        s.n_expert);
    add(p + "ffn_down_exps.weight", TensorRole::kMoeDownExperts, il, down, s.n_ff_exp, s.n_embd,
        s.n_expert);
    if (s.n_ff_shexp > 0) {
      add(p + "ffn_gate_shexp.weight", TensorRole::kSharedExpert, il, gate_up, s.n_embd,
          s.n_ff_shexp);
      add(p + "ffn_up_shexp.weight", TensorRole::kSharedExpert, il, gate_up, s.n_embd,
          s.n_ff_shexp);
      add(p + "ffn_down_shexp.weight", TensorRole::kSharedExpert, il, down, s.n_ff_shexp, s.n_embd);
    }
  }

  ModelTensors build() {
    m.name = s.name;
    m.architecture = s.architecture;
    m.n_layer = static_cast<int>(s.n_layer);
    m.n_embd = s.n_embd;
    m.n_head = s.n_head;
    m.n_vocab = s.n_vocab;
    // A BPE vocabulary as GGUF files carry it: tokens, token types and merges.
    m.n_tokens = m.n_merges = static_cast<uint64_t>(s.n_vocab);
    m.metadata_array_elements = 3 * static_cast<uint64_t>(s.n_vocab);
    m.n_expert = s.n_expert;
    m.n_expert_used = s.n_expert_used;
    m.n_ff = std::max(s.n_ff, s.n_ff_exp * std::max<int64_t>(s.n_expert_used, 1) + s.n_ff_shexp);
    int64_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
    m.kv_elements_per_token = static_cast<uint64_t>(
        s.n_layer * (s.kv_lora_rank > 0 ? s.kv_lora_rank + s.qk_rope_dim : 2 * s.n_head_kv * hd));
    add("token_embd.weight", TensorRole::kTokenEmbedding, -1, TensorKind::kTokenEmbd, s.n_embd,
        s.n_vocab);
    for (int il = 0; il < s.n_layer; ++il) {
      std::string p = "blk." + std::to_string(il) + ".";
      attention(il, p);
      ffn(il, p);
    }
    add_norm("output_norm.weight", TensorRole::kOutputNorm, -1, s.n_embd);
    if (!s.tied_embeddings) {
      add("output.weight", TensorRole::kOutput, -1, TensorKind::kOutput, s.n_embd, s.n_vocab);
    }
    set_access_frequencies(m);
    return std::move(m);
  }
};

}  // namespace

ModelTensors synthetic_model(const ShapeSpec& spec) {
  return Builder{spec, {}}.build();
}

ShapeSpec qwen25_14b_q4km() {
  ShapeSpec s;
  s.name = "Qwen2.5-14B Q4_K_M (shape)";
  s.architecture = "qwen2";
  s.n_vocab = 152064;
  s.n_embd = 5120;
  s.n_layer = 48;
  s.n_head = 40;
  s.n_head_kv = 8;
  s.n_ff = 13824;
  s.qkv_bias = true;
  return s;
}

ShapeSpec mixtral_8x7b_q5km() {
  ShapeSpec s;
  s.name = "Mixtral-8x7B Q5_K_M (shape)";
  s.n_vocab = 32000;
  s.n_embd = 4096;
  s.n_layer = 32;
  s.n_head = 32;
  s.n_head_kv = 8;
  s.n_ff = 14336;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 14336;
  s.mix = synth::QuantMix::kQ5_K_M;
  return s;
}

ShapeSpec mixtral_8x7b_q4km() {
  ShapeSpec s = mixtral_8x7b_q5km();
  s.name = "Mixtral-8x7B Q4_K_M (shape)";
  s.mix = synth::QuantMix::kQ4_K_M;
  return s;
}

ShapeSpec moe_preset_q4km() {
  ShapeSpec s;
  s.name = "moe preset Q4_K_M (shape)";
  s.n_vocab = 32000;
  s.n_embd = 2048;
  s.n_layer = 24;
  s.n_head = 32;
  s.n_head_kv = 8;
  s.n_ff = 5632;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 5632;
  return s;
}

ShapeSpec llama33_70b_q4km() {
  ShapeSpec s;
  s.name = "Llama-3.3-70B Q4_K_M (shape)";
  s.n_vocab = 128256;
  s.n_embd = 8192;
  s.n_layer = 80;
  s.n_head = 64;
  s.n_head_kv = 8;
  s.n_ff = 28672;
  return s;
}

ShapeSpec qwen3_30b_a3b_q4km() {
  ShapeSpec s;
  s.name = "Qwen3-30B-A3B Q4_K_M (shape)";
  s.architecture = "qwen3moe";
  s.n_vocab = 151936;
  s.n_embd = 2048;
  s.n_layer = 48;
  s.n_head = 32;
  s.n_head_kv = 4;
  s.head_dim = 128;
  s.n_ff = 6144;
  s.n_expert = 128;
  s.n_expert_used = 8;
  s.n_ff_exp = 768;
  return s;
}

ShapeSpec kimi_k2_q4km() {
  ShapeSpec s;
  s.name = "Kimi-K2 1T Q4_K_M (shape)";
  s.architecture = "deepseek2";
  s.n_vocab = 163840;
  s.n_embd = 7168;
  s.n_layer = 61;
  s.n_head = 64;
  s.n_head_kv = 64;
  s.n_ff = 18432;
  s.n_expert = 384;
  s.n_expert_used = 8;
  s.n_ff_exp = 2048;
  s.n_ff_shexp = 2048;
  s.n_dense_layers = 1;
  s.q_lora_rank = 1536;
  s.kv_lora_rank = 512;
  s.qk_rope_dim = 64;
  s.qk_nope_dim = 128;
  s.v_head_dim = 128;
  return s;
}

ShapeSpec llama3_8b_q4km() {
  ShapeSpec s;
  s.name = "8b preset Q4_K_M (shape)";
  s.n_vocab = 128256;
  s.n_embd = 4096;
  s.n_layer = 32;
  s.n_head = 32;
  s.n_head_kv = 8;
  s.n_ff = 14336;
  return s;
}

}  // namespace hypura::scheduler
