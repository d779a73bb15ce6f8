// The tensor list of a synthetic model: llama.cpp's names and shapes per architecture,
// and the type llama-quantize would give each tensor in the chosen mix.
#include <cmath>

#include "synth/synth.h"

namespace hypura::synth {
namespace {

using gguf::GgmlType;

using Kind = TensorKind;

// llama.cpp's use_more_bits(): the first and last eighth of the layers, and every third
// layer between, get more bits for attn_v and ffn_down in the _M mixes.
bool use_more_bits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

// K-quant rows must be multiples of 256; llama-quantize falls back to these otherwise.
GgmlType fallback(GgmlType type, int64_t row) {
  if (row % 256 == 0) return type;
  switch (type) {
    case GgmlType::Q4_K:
      return GgmlType::Q5_0;
    case GgmlType::Q5_K:
      return GgmlType::Q5_1;
    case GgmlType::Q6_K:
      return GgmlType::Q8_0;
    default:
      return type;
  }
}

// The _M mixes, following llama_tensor_get_type() in llama.cpp.
GgmlType k_mix_type(const MixModel& c, Kind kind, int64_t layer) {
  const bool q4 = c.mix == QuantMix::kQ4_K_M;
  const GgmlType base = q4 ? GgmlType::Q4_K : GgmlType::Q5_K;
  const int64_t n_layer = c.n_layer;
  const bool eight_experts = c.n_expert == 8;
  switch (kind) {
    case Kind::kOutput:
      return GgmlType::Q6_K;
    case Kind::kTokenEmbd:
      return c.has_output ? base : GgmlType::Q6_K;
    case Kind::kAttnV: {
      if (eight_experts) return GgmlType::Q8_0;
      GgmlType t = use_more_bits(layer, n_layer) ? GgmlType::Q6_K : base;
      // llama.cpp's 70B rule: 8x-shared attn_v is tiny, so give it Q5_K.
      if (n_layer == 80 && c.arch == Arch::kLlama && t == GgmlType::Q4_K) t = GgmlType::Q5_K;
      return t;
    }
    case Kind::kAttnK:
      return eight_experts ? GgmlType::Q8_0 : base;
    case Kind::kAttnOut:
      return eight_experts && q4 ? GgmlType::Q5_K : base;
    case Kind::kFfnDown:
      return use_more_bits(layer, n_layer) ? GgmlType::Q6_K : base;
    default:
      return base;
  }
}

}  // namespace

GgmlType mix_type(const MixModel& c, Kind kind, int64_t layer, const std::vector<int64_t>& ne) {
  if (kind == Kind::kNorm || kind == Kind::kBias || kind == Kind::kSinks ||
      kind == Kind::kSelectionBias || kind == Kind::kRouter)
    return GgmlType::F32;
  switch (c.mix) {
    case QuantMix::kF32:
      return GgmlType::F32;
    case QuantMix::kF16:
      return GgmlType::F16;
    case QuantMix::kQ8_0:
      return GgmlType::Q8_0;
    case QuantMix::kMxfp4Moe:  // llama-quantize: 3-D (expert) tensors MXFP4, the rest Q8_0
      return ne.size() == 3 ? GgmlType::MXFP4 : GgmlType::Q8_0;
    default:
      return fallback(k_mix_type(c, kind, layer), ne[0]);
  }
}

namespace {

ValueSpec values_for(Kind kind, int64_t fan_in) {
  switch (kind) {
    case Kind::kNorm:
      return {1.0f, 0.02f};  // gains near 1 (gemma's are stored with the +1)
    case Kind::kBias:
      return {0.0f, 0.02f};
    case Kind::kSinks:
      return {0.0f, 1.0f};  // logits on the scale of attention scores
    case Kind::kSelectionBias:
      return {0.0f, 0.1f};
    default:
      return {0.0f, 1.0f / std::sqrt(static_cast<float>(fan_in))};
  }
}

class Planner {
 public:
  explicit Planner(const SynthSpec& spec)
      : spec_(spec),
        c_{spec.mix, spec.arch, spec.shape.n_layer, spec.shape.n_expert,
           spec.arch != Arch::kGemma3 && !spec.tied_embeddings},
        s_(spec.shape) {}

  std::vector<TensorPlan> run() {
    add("token_embd.weight", Kind::kTokenEmbd, -1, {s_.n_embd, s_.n_vocab});
    for (int64_t il = 0; il < s_.n_layer + s_.n_nextn; ++il) add_layer(il);
    add("output_norm.weight", Kind::kNorm, -1, {s_.n_embd});
    if (c_.has_output) add("output.weight", Kind::kOutput, -1, {s_.n_embd, s_.n_vocab});
    return std::move(out_);
  }

 private:
  void add(std::string name, Kind kind, int64_t layer, std::vector<int64_t> ne) {
    GgmlType type = mix_type(c_, kind, layer, ne);
    ValueSpec values = values_for(kind, ne[0]);
    if (kind == Kind::kOutput || (kind == Kind::kTokenEmbd && !c_.has_output)) {
      values.std *= static_cast<float>(spec_.logit_scale);
    }
    out_.push_back(TensorPlan{std::move(name), type, std::move(ne), values});
  }
  void add_blk(int64_t il, const char* what, Kind kind, std::vector<int64_t> ne) {
    add("blk." + std::to_string(il) + "." + what, kind, il, std::move(ne));
  }

  // deepseek2: latent attention (attn_kv_b split per head into attn_k_b / attn_v_b, as
  // llama.cpp's converter writes it), a dense FFN in the leading layers, then routed
  // experts with the router's score bias and the shared experts.
  void add_deepseek2_layer(int64_t il) {
    const Mla& m = s_.mla;
    const int64_t e = s_.n_embd, h = s_.n_head, nope = s_.head_dim - s_.n_rot;
    add_blk(il, "attn_norm.weight", Kind::kNorm, {e});
    if (m.q_lora_rank > 0) {
      add_blk(il, "attn_q_a.weight", Kind::kAttnQ, {e, m.q_lora_rank});
      add_blk(il, "attn_q_a_norm.weight", Kind::kNorm, {m.q_lora_rank});
      add_blk(il, "attn_q_b.weight", Kind::kAttnQ, {m.q_lora_rank, h * s_.head_dim});
    } else {
      add_blk(il, "attn_q.weight", Kind::kAttnQ, {e, h * s_.head_dim});
    }
    add_blk(il, "attn_kv_a_mqa.weight", Kind::kAttnQ, {e, m.kv_lora_rank + s_.n_rot});
    add_blk(il, "attn_kv_a_norm.weight", Kind::kNorm, {m.kv_lora_rank});
    add_blk(il, "attn_k_b.weight", Kind::kAttnQ, {nope, m.kv_lora_rank, h});
    add_blk(il, "attn_v_b.weight", Kind::kAttnQ, {m.kv_lora_rank, m.v_head_dim, h});
    add_blk(il, "attn_output.weight", Kind::kAttnOut, {h * m.v_head_dim, e});
    add_blk(il, "ffn_norm.weight", Kind::kNorm, {e});
    if (il < s_.n_dense_lead) {
      add_blk(il, "ffn_gate.weight", Kind::kFfnGateUp, {e, s_.n_ff});
      add_blk(il, "ffn_up.weight", Kind::kFfnGateUp, {e, s_.n_ff});
      add_blk(il, "ffn_down.weight", Kind::kFfnDown, {s_.n_ff, e});
      return;
    }
    add_experts(il);
  }

  // Shared experts of `width` (0: none): a dense SwiGLU beside the routed ones.
  void add_shared_expert(int64_t il, int64_t width) {
    if (width == 0) return;
    add_blk(il, "ffn_gate_shexp.weight", Kind::kFfnGateUp, {s_.n_embd, width});
    add_blk(il, "ffn_up_shexp.weight", Kind::kFfnGateUp, {s_.n_embd, width});
    add_blk(il, "ffn_down_shexp.weight", Kind::kFfnDown, {width, s_.n_embd});
  }

  void add_layer(int64_t il) {
    const Arch arch = spec_.arch;
    if (arch == Arch::kDeepseek2) return add_deepseek2_layer(il);
    const int64_t n_q = s_.n_head * s_.head_dim;
    const int64_t n_kv = s_.n_head_kv * s_.head_dim;
    const bool qk_norm = arch == Arch::kQwen3 || arch == Arch::kQwen3Moe || arch == Arch::kGemma3;
    const bool gpt_oss = arch == Arch::kGptOss;
    add_blk(il, "attn_norm.weight", Kind::kNorm, {s_.n_embd});
    add_blk(il, "attn_q.weight", Kind::kAttnQ, {s_.n_embd, n_q});
    add_blk(il, "attn_k.weight", Kind::kAttnK, {s_.n_embd, n_kv});
    add_blk(il, "attn_v.weight", Kind::kAttnV, {s_.n_embd, n_kv});
    if (arch == Arch::kQwen2 || gpt_oss || arch == Arch::kGlm4Moe) {
      add_blk(il, "attn_q.bias", Kind::kBias, {n_q});
      add_blk(il, "attn_k.bias", Kind::kBias, {n_kv});
      add_blk(il, "attn_v.bias", Kind::kBias, {n_kv});
    }
    if (qk_norm) {
      add_blk(il, "attn_q_norm.weight", Kind::kNorm, {s_.head_dim});
      add_blk(il, "attn_k_norm.weight", Kind::kNorm, {s_.head_dim});
    }
    add_blk(il, "attn_output.weight", Kind::kAttnOut, {n_q, s_.n_embd});
    if (gpt_oss) {
      add_blk(il, "attn_output.bias", Kind::kBias, {s_.n_embd});
      add_blk(il, "attn_sinks.weight", Kind::kSinks, {s_.n_head});
    }
    // gpt-oss's and glm4moe's FFN input norm is named post_attention_norm; no ffn_norm.
    const bool post_norm = gpt_oss || arch == Arch::kGlm4Moe;
    if (arch == Arch::kGemma3 || post_norm)
      add_blk(il, "post_attention_norm.weight", Kind::kNorm, {s_.n_embd});
    if (!post_norm) add_blk(il, "ffn_norm.weight", Kind::kNorm, {s_.n_embd});
    if (arch_is_moe(arch) && il >= s_.n_dense_lead) {
      add_experts(il);
    } else {
      add_blk(il, "ffn_gate.weight", Kind::kFfnGateUp, {s_.n_embd, s_.n_ff});
      add_blk(il, "ffn_up.weight", Kind::kFfnGateUp, {s_.n_embd, s_.n_ff});
      add_blk(il, "ffn_down.weight", Kind::kFfnDown, {s_.n_ff, s_.n_embd});
    }
    if (arch == Arch::kGemma3) add_blk(il, "post_ffw_norm.weight", Kind::kNorm, {s_.n_embd});
    if (il >= s_.n_layer) add_nextn(il);
  }

  // A NextN (multi-token prediction) layer's own tensors, as llama.cpp loads them.
  void add_nextn(int64_t il) {
    add_blk(il, "nextn.eh_proj.weight", Kind::kFfnGateUp, {2 * s_.n_embd, s_.n_embd});
    add_blk(il, "nextn.enorm.weight", Kind::kNorm, {s_.n_embd});
    add_blk(il, "nextn.hnorm.weight", Kind::kNorm, {s_.n_embd});
    add_blk(il, "nextn.shared_head_norm.weight", Kind::kNorm, {s_.n_embd});
  }

  // Stacked experts: ne = {n_embd, n_ff_exp, n_expert} for gate/up, {n_ff_exp, n_embd,
  // n_expert} for down; the router maps n_embd to one logit per expert. gpt-oss adds a
  // bias to the router and to each expert's three outputs.
  void add_experts(int64_t il) {
    const bool biases = spec_.arch == Arch::kGptOss;
    add_blk(il, "ffn_gate_inp.weight", Kind::kRouter, {s_.n_embd, s_.n_expert});
    if (biases) add_blk(il, "ffn_gate_inp.bias", Kind::kBias, {s_.n_expert});
    add_blk(il, "ffn_gate_exps.weight", Kind::kFfnGateUp, {s_.n_embd, s_.n_ff_exp, s_.n_expert});
    if (biases) add_blk(il, "ffn_gate_exps.bias", Kind::kBias, {s_.n_ff_exp, s_.n_expert});
    add_blk(il, "ffn_up_exps.weight", Kind::kFfnGateUp, {s_.n_embd, s_.n_ff_exp, s_.n_expert});
    if (biases) add_blk(il, "ffn_up_exps.bias", Kind::kBias, {s_.n_ff_exp, s_.n_expert});
    add_blk(il, "ffn_down_exps.weight", Kind::kFfnDown, {s_.n_ff_exp, s_.n_embd, s_.n_expert});
    if (biases) add_blk(il, "ffn_down_exps.bias", Kind::kBias, {s_.n_embd, s_.n_expert});
    if (spec_.arch == Arch::kGlm4Moe) {
      add_blk(il, "exp_probs_b.bias", Kind::kSelectionBias, {s_.n_expert});
    } else if (spec_.arch == Arch::kDeepseek2 && s_.mla.sigmoid) {
      // At a bias's scale: the deepseek2 goldens were made from these values.
      add_blk(il, "exp_probs_b.bias", Kind::kBias, {s_.n_expert});
    }
    add_shared_expert(il, s_.n_ff_exp * s_.n_expert_shared);
  }

  const SynthSpec& spec_;
  MixModel c_;
  const Shape& s_;
  std::vector<TensorPlan> out_;
};

}  // namespace

std::vector<TensorPlan> plan_tensors(const SynthSpec& spec) {
  return Planner(spec).run();
}

SynthSummary summarize(const std::vector<TensorPlan>& tensors) {
  SynthSummary sum;
  for (const TensorPlan& t : tensors) {
    uint64_t n = 1;
    for (int64_t d : t.ne) n *= static_cast<uint64_t>(d);
    sum.n_params += n;
    sum.data_bytes += gguf::row_bytes(t.type, t.ne[0]) * (n / static_cast<uint64_t>(t.ne[0]));
  }
  sum.n_tensors = tensors.size();
  return sum;
}

}  // namespace hypura::synth
