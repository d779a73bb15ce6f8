// Architectures, quant mixes, preset shapes and spec validation for synthetic models.
#include <algorithm>
#include <cctype>

#include "synth/synth.h"

namespace hypura::synth {
namespace {

struct ArchName {
  Arch arch;
  const char* cli;
  const char* gguf;
  bool moe;
};
constexpr ArchName kArchNames[] = {
    {Arch::kLlama, "llama", "llama", false},
    {Arch::kQwen2, "qwen2", "qwen2", false},
    {Arch::kQwen3, "qwen3", "qwen3", false},
    {Arch::kGemma3, "gemma3", "gemma3", false},
    {Arch::kMixtral, "mixtral", "llama", true},
    {Arch::kQwen3Moe, "qwen3moe", "qwen3moe", true},
    {Arch::kDeepseek2, "deepseek2", "deepseek2", true},
    {Arch::kGptOss, "gpt-oss", "gpt-oss", true},
    {Arch::kGlm4Moe, "glm4moe", "glm4moe", true},
};

const ArchName& arch_entry(Arch arch) {
  for (const ArchName& a : kArchNames) {
    if (a.arch == arch) return a;
  }
  return kArchNames[0];
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Upper bounds that keep every product below 2^63 and reject typos like 40960000.
constexpr int64_t kMaxDim = 1 << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxExperts = 1024;
constexpr int64_t kMaxVocab = 1 << 22;

Status check_range(const char* what, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return invalid_argument(std::string(what) + " must be in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got " + std::to_string(v));
  }
  return Status::ok();
}

Status check_mla(const Shape& s) {
  const Mla& m = s.mla;
  HYPURA_RETURN_IF_ERROR(check_range("kv_lora_rank", m.kv_lora_rank, 2, kMaxDim));
  HYPURA_RETURN_IF_ERROR(check_range("q_lora_rank", m.q_lora_rank, 0, kMaxDim));
  HYPURA_RETURN_IF_ERROR(check_range("qk_rope (n_rot)", s.n_rot, 2, s.head_dim - 2));
  HYPURA_RETURN_IF_ERROR(check_range("v_head_dim", m.v_head_dim, 1, kMaxDim));
  if (m.n_group > 0 && s.n_expert % m.n_group != 0) {
    return invalid_argument("n_expert must be a multiple of the expert groups");
  }
  return check_range("n_group_used", m.n_group_used, 0, m.n_group);
}

Status check_experts(Arch arch, Shape& s) {
  if (!arch_is_moe(arch)) {
    if (s.n_expert != 0) {
      return invalid_argument(
          std::string(arch_cli_name(arch)) +
          " is dense; use --arch mixtral, qwen3moe, gpt-oss or glm4moe for experts");
    }
    return check_range("n_ff", s.n_ff, 1, kMaxDim);
  }
  // Mixtral stores the expert width as feed_forward_length; either flag sets it.
  if (arch == Arch::kMixtral) {
    if (s.n_ff_exp == 0) s.n_ff_exp = s.n_ff;
    s.n_ff = s.n_ff_exp;
  }
  if (s.n_ff == 0) s.n_ff = s.n_ff_exp;
  if (arch == Arch::kDeepseek2) HYPURA_RETURN_IF_ERROR(check_mla(s));
  HYPURA_RETURN_IF_ERROR(check_range("n_expert", s.n_expert, 1, kMaxExperts));
  HYPURA_RETURN_IF_ERROR(check_range("n_expert_used", s.n_expert_used, 1, s.n_expert));
  HYPURA_RETURN_IF_ERROR(check_range("n_ff_exp", s.n_ff_exp, 1, kMaxDim));
  return check_range("n_ff", s.n_ff, 1, kMaxDim);
}

// glm4moe's and deepseek2's parts: partial RoPE, shared experts, leading dense layers, the
// expert weights scale; NextN layers (glm4moe's only).
Status check_shared_parts(Arch arch, Shape& s) {
  if (arch != Arch::kGlm4Moe && s.n_nextn != 0) {
    return invalid_argument("n_nextn is glm4moe's (--arch glm4moe)");
  }
  if (arch != Arch::kGlm4Moe && arch != Arch::kDeepseek2) {
    if (s.n_rot != 0 || s.n_expert_shared != 0 || s.n_dense_lead != 0 ||
        s.expert_weights_scale != 1.0) {
      return invalid_argument(
          "n_rot, n_expert_shared, n_dense_lead and the expert weights scale are glm4moe's and "
          "deepseek2's (--arch glm4moe or deepseek2)");
    }
    return Status::ok();
  }
  if (s.n_rot == 0) s.n_rot = s.head_dim;
  HYPURA_RETURN_IF_ERROR(check_range("n_rot", s.n_rot, 2, s.head_dim));
  if (s.n_rot % 2 != 0) return invalid_argument("n_rot must be even (rope rotates pairs)");
  HYPURA_RETURN_IF_ERROR(check_range("n_expert_shared", s.n_expert_shared, 0, 64));
  HYPURA_RETURN_IF_ERROR(check_range("n_dense_lead", s.n_dense_lead, 0, s.n_layer));
  HYPURA_RETURN_IF_ERROR(check_range("n_nextn", s.n_nextn, 0, 16));
  if (!(s.expert_weights_scale > 0)) return invalid_argument("expert weights scale must be > 0");
  return Status::ok();
}

// Quantized mixes need every row length to be a multiple of 32 (the legacy block size;
// K-quant rows that are not multiples of 256 fall back as llama-quantize does).
Status check_row_lengths(const SynthSpec& spec) {
  if (spec.mix == QuantMix::kF32 || spec.mix == QuantMix::kF16) return Status::ok();
  const Shape& s = spec.shape;
  const bool dense_ffn = !arch_is_moe(spec.arch) || s.n_dense_lead > 0;
  const Mla& m = s.mla;
  const int64_t nope = spec.arch == Arch::kDeepseek2 ? s.head_dim - s.n_rot : 32;
  int64_t rows[] = {s.n_embd,
                    s.n_head * s.head_dim,
                    arch_is_moe(spec.arch) ? s.n_ff_exp : s.n_ff,
                    nope,
                    m.q_lora_rank,
                    m.kv_lora_rank,
                    s.n_head * m.v_head_dim,
                    dense_ffn ? s.n_ff : s.n_embd};
  for (int64_t n : rows) {
    if (n % 32 != 0) {
      return invalid_argument("row length " + std::to_string(n) + " is not a multiple of 32, " +
                              "which " + mix_name(spec.mix) + " needs (use --quant f16 or f32)");
    }
  }
  return Status::ok();
}

Status check_shape(Arch arch, Shape& s) {
  HYPURA_RETURN_IF_ERROR(check_range("n_embd", s.n_embd, 1, kMaxDim));
  HYPURA_RETURN_IF_ERROR(check_range("n_layer", s.n_layer, 1, kMaxLayers));
  HYPURA_RETURN_IF_ERROR(check_range("n_head", s.n_head, 1, kMaxDim));
  HYPURA_RETURN_IF_ERROR(check_range("n_head_kv", s.n_head_kv, 1, s.n_head));
  if (s.n_head % s.n_head_kv != 0)
    return invalid_argument("n_head must be a multiple of n_head_kv");
  if (s.head_dim == 0) {
    if (s.n_embd % s.n_head != 0) return invalid_argument("n_embd must be a multiple of n_head");
    s.head_dim = s.n_embd / s.n_head;
  }
  HYPURA_RETURN_IF_ERROR(check_range("head_dim", s.head_dim, 2, 4096));
  if (s.head_dim % 2 != 0) return invalid_argument("head_dim must be even (rope rotates pairs)");
  HYPURA_RETURN_IF_ERROR(check_range("n_vocab", s.n_vocab, 0, kMaxVocab));
  HYPURA_RETURN_IF_ERROR(check_range("n_ctx", s.n_ctx, 1, 1 << 24));
  HYPURA_RETURN_IF_ERROR(check_experts(arch, s));
  return check_shared_parts(arch, s);
}

Shape dense(int64_t n_vocab, int64_t n_embd, int64_t n_layer, int64_t n_head, int64_t n_head_kv,
            int64_t n_ff, int64_t n_ctx, double rope_freq_base = 0) {
  Shape s;
  s.n_vocab = n_vocab;
  s.n_embd = n_embd;
  s.n_layer = n_layer;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.n_ff = n_ff;
  s.n_ctx = n_ctx;
  s.rope_freq_base = rope_freq_base;
  return s;
}

Shape with_experts(Shape s, int64_t n_expert, int64_t n_expert_used, int64_t n_ff_exp) {
  s.n_expert = n_expert;
  s.n_expert_used = n_expert_used;
  s.n_ff_exp = n_ff_exp;
  return s;
}

}  // namespace

const char* arch_gguf_name(Arch arch) {
  return arch_entry(arch).gguf;
}
const char* arch_cli_name(Arch arch) {
  return arch_entry(arch).cli;
}
bool arch_is_moe(Arch arch) {
  return arch_entry(arch).moe;
}

Result<Arch> parse_arch(std::string_view name) {
  std::string n = lower(name);
  for (const ArchName& a : kArchNames) {
    if (n == a.cli) return a.arch;
  }
  return invalid_argument(
      "unknown architecture '" + std::string(name) +
      "' (llama, qwen2, qwen3, gemma3, mixtral, qwen3moe, deepseek2, gpt-oss, glm4moe)");
}

const char* mix_name(QuantMix mix) {
  switch (mix) {
    case QuantMix::kF32:
      return "F32";
    case QuantMix::kF16:
      return "F16";
    case QuantMix::kQ8_0:
      return "Q8_0";
    case QuantMix::kQ4_K_M:
      return "Q4_K_M";
    case QuantMix::kQ5_K_M:
      return "Q5_K_M";
    case QuantMix::kMxfp4Moe:
      return "MXFP4_MOE";
  }
  return "?";
}

uint32_t mix_file_type(QuantMix mix) {
  // llama_ftype: ALL_F32 = 0, MOSTLY_F16 = 1, MOSTLY_Q8_0 = 7, Q4_K_M = 15, Q5_K_M = 17,
  // MXFP4_MOE = 38
  switch (mix) {
    case QuantMix::kF32:
      return 0;
    case QuantMix::kF16:
      return 1;
    case QuantMix::kQ8_0:
      return 7;
    case QuantMix::kQ4_K_M:
      return 15;
    case QuantMix::kQ5_K_M:
      return 17;
    case QuantMix::kMxfp4Moe:
      return 38;
  }
  return 0;
}

Result<QuantMix> parse_mix(std::string_view name) {
  std::string n = lower(name);
  for (QuantMix m : {QuantMix::kF32, QuantMix::kF16, QuantMix::kQ8_0, QuantMix::kQ4_K_M,
                     QuantMix::kQ5_K_M, QuantMix::kMxfp4Moe}) {
    if (n == lower(mix_name(m))) return m;
  }
  return invalid_argument("unknown quant mix '" + std::string(name) +
                          "' (f32, f16, q8_0, q4_k_m, q5_k_m, mxfp4_moe)");
}

const std::vector<Preset>& presets() {
  // Public model configurations (SPEC.md section 5); n_vocab 0 = the vocabulary source's.
  static const std::vector<Preset> kPresets = [] {
    Shape tiny = with_experts(dense(0, 256, 2, 4, 2, 512, 2048), 4, 2, 256);
    Shape qwen3_30b = with_experts(dense(151936, 2048, 48, 32, 4, 6144, 40960, 1e6), 128, 8, 768);
    qwen3_30b.head_dim = 128;
    // DeepSeek-V3 / R1 (config.json): sigmoid routing over 8 groups of 32 experts, 4 used.
    Shape v3 = with_experts(dense(129280, 7168, 61, 128, 128, 18432, 163840, 10000), 256, 8, 2048);
    v3.head_dim = 192;
    v3.n_rot = 64;
    v3.n_expert_shared = 1;
    v3.n_dense_lead = 3;
    v3.expert_weights_scale = 2.5;
    v3.mla = {1536, 512, 128, 8, 4, true, true, 40.0f, 4096, 1.0f};
    // DeepSeek-V2-Lite: no q compression, softmax routing without renormalisation.
    Shape v2_lite =
        with_experts(dense(102400, 2048, 27, 16, 16, 10944, 163840, 10000), 64, 6, 1408);
    v2_lite.head_dim = 192;
    v2_lite.n_rot = 64;
    v2_lite.n_expert_shared = 2;
    v2_lite.n_dense_lead = 1;
    v2_lite.mla = {0, 512, 128, 1, 1, false, false, 40.0f, 4096, 0.707f};
    // Test shapes of both attention variants; the vocabulary comes from --vocab-from.
    Shape ds_tiny = with_experts(dense(0, 256, 3, 4, 4, 512, 512, 10000), 8, 2, 256);
    ds_tiny.head_dim = 48;
    ds_tiny.n_rot = 16;
    ds_tiny.n_expert_shared = 1;
    ds_tiny.n_dense_lead = 1;
    ds_tiny.expert_weights_scale = 2.5;
    ds_tiny.mla = {96, 64, 32, 2, 1, true, true, 4.0f, 128, 1.0f};
    Shape ds_lite_tiny = ds_tiny;
    ds_lite_tiny.n_expert_shared = 2;
    ds_lite_tiny.expert_weights_scale = 1.0;
    ds_lite_tiny.mla = {0, 64, 32, 0, 0, false, false, 0.0f, 0, 0.0f};
    // gpt-oss: head_dim 64 (64 * 64 != n_embd), window 128, YaRN x32 over 4096 positions.
    const auto gpt_oss = [](int64_t n_vocab, int64_t n_embd, int64_t n_layer, int64_t n_head,
                            int64_t n_head_kv, int64_t n_expert, int64_t n_used, int64_t n_ff,
                            int64_t n_swa) {
      Shape s =
          with_experts(dense(n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, 131072, 150000),
                       n_expert, n_used, n_ff);
      s.head_dim = 64;
      s.n_swa = n_swa;
      return s;
    };
    // GLM-4.5-Air (zai-org/GLM-4.5-Air config.json): 46 layers and one NextN layer, the
    // first dense; half of each 128-wide head rotated; sigmoid routing, one shared expert.
    Shape glm_air = with_experts(dense(151552, 4096, 46, 96, 8, 10944, 131072, 1e6), 128, 8, 1408);
    glm_air.head_dim = 128;
    glm_air.n_rot = 64;
    glm_air.n_expert_shared = glm_air.n_dense_lead = glm_air.n_nextn = 1;
    // The test model: every glm4moe part at golden size (a 384-token vocabulary from
    // --vocab-from), a weights scale that is not 1.
    Shape glm_tiny = with_experts(dense(0, 256, 3, 4, 2, 512, 2048, 1e6), 8, 2, 256);
    glm_tiny.head_dim = 64;
    glm_tiny.n_rot = 32;
    glm_tiny.n_expert_shared = glm_tiny.n_dense_lead = glm_tiny.n_nextn = 1;
    glm_tiny.expert_weights_scale = 2.5;
    return std::vector<Preset>{
        {"tiny", Arch::kLlama, tiny},
        {"1b", Arch::kLlama, dense(32000, 2048, 22, 32, 4, 5632, 2048)},
        {"8b", Arch::kLlama, dense(128256, 4096, 32, 32, 8, 14336, 8192, 500000)},
        {"moe", Arch::kMixtral,
         with_experts(dense(32000, 2048, 24, 32, 8, 0, 4096, 1e6), 8, 2, 5632)},
        {"70b", Arch::kLlama, dense(128256, 8192, 80, 64, 8, 28672, 131072, 500000)},
        {"mixtral-8x7b", Arch::kMixtral,
         with_experts(dense(32000, 4096, 32, 32, 8, 0, 32768, 1e6), 8, 2, 14336)},
        {"qwen3-30b-a3b", Arch::kQwen3Moe, qwen3_30b},
        {"deepseek-v3", Arch::kDeepseek2, v3},
        {"deepseek-v2-lite", Arch::kDeepseek2, v2_lite},
        {"deepseek2-tiny", Arch::kDeepseek2, ds_tiny},
        {"deepseek2-lite-tiny", Arch::kDeepseek2, ds_lite_tiny},
        {"gpt-oss-20b", Arch::kGptOss, gpt_oss(201088, 2880, 24, 64, 8, 32, 4, 2880, 128)},
        {"gpt-oss-120b", Arch::kGptOss, gpt_oss(201088, 2880, 36, 64, 8, 128, 4, 2880, 128)},
        {"gpt-oss-tiny", Arch::kGptOss, gpt_oss(0, 256, 2, 4, 2, 8, 2, 256, 16)},
        {"glm-4.5-air", Arch::kGlm4Moe, glm_air},
        {"glm4moe-tiny", Arch::kGlm4Moe, glm_tiny},
    };
  }();
  return kPresets;
}

Result<Preset> find_preset(std::string_view name) {
  std::string n = lower(name);
  for (const Preset& p : presets()) {
    if (p.name == n) return p;
  }
  return invalid_argument("unknown preset '" + std::string(name) +
                          "' (tiny, 1b, 8b, moe, 70b, mixtral-8x7b, qwen3-30b-a3b, "
                          "deepseek-v3, deepseek-v2-lite, deepseek2-tiny, deepseek2-lite-tiny, "
                          "gpt-oss-20b, gpt-oss-120b, gpt-oss-tiny, glm-4.5-air, glm4moe-tiny)");
}

Result<Shape> preset_shape(const Preset& preset, Arch arch) {
  Shape s = preset.shape;
  if ((preset.default_arch == Arch::kDeepseek2) != (arch == Arch::kDeepseek2)) {
    return invalid_argument("preset " + preset.name + " and --arch " + arch_cli_name(arch) +
                            " do not match: deepseek2 takes the deepseek presets, which only it "
                            "can hold (latent attention)");
  }
  if (!arch_is_moe(arch)) {
    if (arch_is_moe(preset.default_arch)) {
      return invalid_argument("preset " + preset.name +
                              " has experts; use --arch mixtral, qwen3moe, gpt-oss or glm4moe");
    }
    s.n_expert = s.n_expert_used = s.n_ff_exp = 0;
  } else if (s.n_expert == 0) {
    return invalid_argument(
        "preset " + preset.name + " is dense; " + arch_cli_name(arch) +
        " needs experts (use tiny, moe, mixtral-8x7b, qwen3-30b-a3b, gpt-oss-20b)");
  }
  if (arch != Arch::kGlm4Moe && arch != Arch::kDeepseek2) {  // a glm4moe preset's sizes
    s.n_rot = s.n_expert_shared = s.n_dense_lead = s.n_nextn = 0;
    s.expert_weights_scale = 1.0;
  }
  return s;
}

Result<SynthSpec> validate(SynthSpec spec) {
  HYPURA_RETURN_IF_ERROR(check_shape(spec.arch, spec.shape));
  HYPURA_RETURN_IF_ERROR(check_row_lengths(spec));
  if (!(spec.logit_scale > 0 && spec.logit_scale <= 100)) {
    return invalid_argument("logit scale must be in (0, 100], got " +
                            std::to_string(spec.logit_scale));
  }
  if (spec.vocab_from.empty()) {
    return invalid_argument(
        "no vocabulary source: pass --vocab-from FILE (a GGUF with a "
        "tokenizer) or run scripts/fetch-models.sh");
  }
  return spec;
}

}  // namespace hypura::synth
