// Tensor roles from GGUF tensor names.
//
// llama.cpp names tensors the same way across the architectures we support:
//   "<base>.weight" | "<base>.bias" at the top level (token_embd, output, output_norm,
//   rope_freqs), and "blk.<N>.<base>[.<expert>].weight|bias" inside the layer stack.
// Old Mixtral conversions store experts one by one ("blk.0.ffn_gate.3.weight") instead
// of stacked ("blk.0.ffn_gate_exps.weight"); both map to the same expert roles.
#include "model/tensor_role.h"

#include <array>
#include <charconv>
#include <utility>

namespace hypura::model {
namespace {

struct NamedRole {
  std::string_view base;
  TensorRole role;
};

constexpr std::array<NamedRole, 4> kTopLevel = {{
    {"token_embd", TensorRole::kTokenEmbedding},
    {"output", TensorRole::kOutput},
    {"output_norm", TensorRole::kOutputNorm},
    {"rope_freqs", TensorRole::kRopeFreqs},
}};

// Names inside blk.N, without the .weight/.bias suffix. Biases of q/k/v/o are
// recognised by suffix below; their weights use these roles.
constexpr std::array<NamedRole, 35> kLayer = {{
    {"attn_norm", TensorRole::kAttnNorm},
    {"post_attention_norm", TensorRole::kAttnNorm},  // gemma3: norm after attention
    {"attn_q", TensorRole::kAttnQ},
    {"attn_k", TensorRole::kAttnK},
    {"attn_v", TensorRole::kAttnV},
    {"attn_qkv", TensorRole::kAttnQkv},
    {"attn_output", TensorRole::kAttnOutput},
    {"attn_q_norm", TensorRole::kAttnQNorm},
    {"attn_k_norm", TensorRole::kAttnKNorm},
    // deepseek2 multi-head latent attention: q and kv low-rank projections and their norms.
    {"attn_q_a", TensorRole::kAttnQ},
    {"attn_q_b", TensorRole::kAttnQ},
    {"attn_q_a_norm", TensorRole::kAttnQNorm},
    {"attn_kv_a_mqa", TensorRole::kAttnK},
    {"attn_kv_a_norm", TensorRole::kAttnKNorm},
    {"attn_k_b", TensorRole::kAttnK},
    {"attn_v_b", TensorRole::kAttnV},
    {"attn_sinks", TensorRole::kAttnSinks},
    {"ffn_norm", TensorRole::kFfnNorm},
    {"post_ffw_norm", TensorRole::kFfnNorm},  // gemma3: norm after the FFN
    {"ffn_gate", TensorRole::kFfnGate},
    {"ffn_up", TensorRole::kFfnUp},
    {"ffn_down", TensorRole::kFfnDown},
    {"ffn_gate_inp", TensorRole::kMoeRouter},
    {"exp_probs_b", TensorRole::kMoeRouter},  // router score bias (expert selection)
    {"ffn_gate_exps", TensorRole::kMoeGateExperts},
    {"ffn_up_exps", TensorRole::kMoeUpExperts},
    {"ffn_down_exps", TensorRole::kMoeDownExperts},
    {"ffn_gate_shexp", TensorRole::kSharedExpert},
    {"ffn_up_shexp", TensorRole::kSharedExpert},
    {"ffn_down_shexp", TensorRole::kSharedExpert},
    {"ffn_gate_inp_shexp", TensorRole::kSharedExpert},  // qwen2moe shared-expert gate
    {"ffn_norm_exps", TensorRole::kFfnNorm},
    {"layer_output_norm", TensorRole::kFfnNorm},
    {"attn_post_norm", TensorRole::kAttnNorm},
    {"ffn_post_norm", TensorRole::kFfnNorm},
}};

TensorRole lookup(std::string_view base, const auto& table) {
  for (const NamedRole& r : table) {
    if (r.base == base) return r.role;
  }
  return TensorRole::kOther;
}

bool consume_prefix(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

bool consume_suffix(std::string_view* s, std::string_view suffix) {
  if (s->size() < suffix.size() || s->substr(s->size() - suffix.size()) != suffix) return false;
  s->remove_suffix(suffix.size());
  return true;
}

// Parses a decimal index at the front of *s followed by '.', e.g. "12.attn_q".
bool consume_index(std::string_view* s, int* index) {
  auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), *index);
  if (ec != std::errc() || end == s->data() || *index < 0) return false;
  s->remove_prefix(static_cast<size_t>(end - s->data()));
  return consume_prefix(s, ".");
}

// "ffn_gate.3" (one expert of an unstacked Mixtral) -> the stacked expert role.
TensorRole unstacked_expert(std::string_view base) {
  size_t dot = base.rfind('.');
  if (dot == std::string_view::npos) return TensorRole::kOther;
  int expert = 0;
  std::string_view index = base.substr(dot + 1);
  auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), expert);
  if (ec != std::errc() || end != index.data() + index.size()) return TensorRole::kOther;
  TensorRole dense = lookup(base.substr(0, dot), kLayer);
  if (dense == TensorRole::kFfnGate) return TensorRole::kMoeGateExperts;
  if (dense == TensorRole::kFfnUp) return TensorRole::kMoeUpExperts;
  if (dense == TensorRole::kFfnDown) return TensorRole::kMoeDownExperts;
  return TensorRole::kOther;
}

TensorRole layer_role(std::string_view base, bool is_bias, std::string_view architecture) {
  TensorRole role = lookup(base, kLayer);
  if (role == TensorRole::kOther) return unstacked_expert(base);
  // gpt-oss's post_attention_norm is its FFN's input norm (there is no ffn_norm).
  if (role == TensorRole::kAttnNorm && base == "post_attention_norm" && architecture == "gpt-oss")
    return TensorRole::kFfnNorm;
  // Expert biases stay resident: a bias row is a few KiB, too small to read on demand.
  if (is_bias && is_moe_expert(role)) return TensorRole::kMoeExpertBias;
  if (is_bias &&
      (role == TensorRole::kAttnQ || role == TensorRole::kAttnK || role == TensorRole::kAttnV ||
       role == TensorRole::kAttnQkv || role == TensorRole::kAttnOutput)) {
    return TensorRole::kAttnBias;
  }
  return role;
}

}  // namespace

TensorClass classify_tensor(std::string_view name, std::string_view architecture) {
  // The architectures we support share llama.cpp's names; `architecture` is the place
  // to special-case one that does not (layer_role).
  std::string_view base = name;
  bool is_bias = consume_suffix(&base, ".bias");
  if (!is_bias) consume_suffix(&base, ".weight");
  TensorClass c;
  if (consume_prefix(&base, "blk.")) {
    int layer = 0;
    if (!consume_index(&base, &layer)) return c;
    c.layer = layer;
    c.role = layer_role(base, is_bias, architecture);
    return c;
  }
  c.role = lookup(base, kTopLevel);
  return c;
}

const char* role_name(TensorRole role) {
  switch (role) {
    case TensorRole::kTokenEmbedding:
      return "token_embd";
    case TensorRole::kOutput:
      return "output";
    case TensorRole::kOutputNorm:
      return "output_norm";
    case TensorRole::kAttnQ:
      return "attn_q";
    case TensorRole::kAttnK:
      return "attn_k";
    case TensorRole::kAttnV:
      return "attn_v";
    case TensorRole::kAttnQkv:
      return "attn_qkv";
    case TensorRole::kAttnOutput:
      return "attn_output";
    case TensorRole::kAttnNorm:
      return "attn_norm";
    case TensorRole::kAttnQNorm:
      return "attn_q_norm";
    case TensorRole::kAttnKNorm:
      return "attn_k_norm";
    case TensorRole::kAttnBias:
      return "attn_bias";
    case TensorRole::kAttnSinks:
      return "attn_sinks";
    case TensorRole::kFfnNorm:
      return "ffn_norm";
    case TensorRole::kFfnGate:
      return "ffn_gate";
    case TensorRole::kFfnUp:
      return "ffn_up";
    case TensorRole::kFfnDown:
      return "ffn_down";
    case TensorRole::kMoeRouter:
      return "moe_router";
    case TensorRole::kMoeGateExperts:
      return "moe_experts_gate";
    case TensorRole::kMoeUpExperts:
      return "moe_experts_up";
    case TensorRole::kMoeDownExperts:
      return "moe_experts_down";
    case TensorRole::kMoeExpertBias:
      return "moe_expert_bias";
    case TensorRole::kSharedExpert:
      return "shared_expert";
    case TensorRole::kRopeFreqs:
      return "rope_freqs";
    case TensorRole::kOther:
      return "other";
  }
  return "other";
}

bool is_moe_expert(TensorRole role) {
  return role == TensorRole::kMoeGateExperts || role == TensorRole::kMoeUpExperts ||
         role == TensorRole::kMoeDownExperts;
}

bool is_dense_ffn(TensorRole role) {
  return role == TensorRole::kFfnGate || role == TensorRole::kFfnUp || role == TensorRole::kFfnDown;
}

bool is_attention(TensorRole role) {
  switch (role) {
    case TensorRole::kAttnQ:
    case TensorRole::kAttnK:
    case TensorRole::kAttnV:
    case TensorRole::kAttnQkv:
    case TensorRole::kAttnOutput:
    case TensorRole::kAttnNorm:
    case TensorRole::kAttnQNorm:
    case TensorRole::kAttnKNorm:
    case TensorRole::kAttnBias:
    case TensorRole::kAttnSinks:
      return true;
    default:
      return false;
  }
}

bool is_norm(TensorRole role) {
  return role == TensorRole::kOutputNorm || role == TensorRole::kAttnNorm ||
         role == TensorRole::kAttnQNorm || role == TensorRole::kAttnKNorm ||
         role == TensorRole::kFfnNorm;
}

}  // namespace hypura::model
