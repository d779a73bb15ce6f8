// Synthetic GGUF models: any supported architecture and shape, written straight to disk.
//
// `hypura synth` uses this to make test and benchmark models bigger than RAM (a 40 GB
// Llama-70B-shaped file on a 24 GiB machine). Tensor names, shapes and metadata keys are
// llama.cpp's for each architecture, and the quant mix follows llama-quantize's choices
// (Q4_K_M / Q5_K_M), so the files look like real ones to every loader. The tokenizer
// is copied from a real model (docs/MODELS.md), resized to the shape's vocabulary.
//
// Weights are deterministic pseudo-random values written as valid quantized blocks (random
// quants, scales chosen so dequantized weights have std 1/sqrt(fan_in), norms ~1): no
// quantizer runs, so writing is disk-bound, and the same spec and seed give the same bytes.
// Memory stays constant (one chunk buffer plus the tokenizer arrays) whatever the size.
//
// Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "synth/random_blocks.h"

namespace hypura::synth {

enum class Arch {
  kLlama,
  kQwen2,
  kQwen3,
  kGemma3,
  kMixtral,
  kQwen3Moe,
  kDeepseek2,
  kGptOss,
  kGlm4Moe
};
// Mixtral is GGUF architecture "llama" with experts; the rest are named as in GGUF.
const char* arch_gguf_name(Arch arch);
// "llama", "qwen2", "qwen3", "gemma3", "mixtral", "qwen3moe", "gpt-oss", "glm4moe"
const char* arch_cli_name(Arch arch);
bool arch_is_moe(Arch arch);
Result<Arch> parse_arch(std::string_view name);

// Quant mixes named as llama-quantize's file types. F32: every tensor F32, the source that
// llama-quantize turns into reference mixes. MXFP4_MOE: stacked expert tensors MXFP4,
// every other matrix Q8_0 (gpt-oss's published files).
enum class QuantMix { kF32, kF16, kQ8_0, kQ4_K_M, kQ5_K_M, kMxfp4Moe };
const char* mix_name(QuantMix mix);    // "F32", "F16", "Q8_0", "Q4_K_M", "Q5_K_M", "MXFP4_MOE"
uint32_t mix_file_type(QuantMix mix);  // general.file_type (llama_ftype numbering)
Result<QuantMix> parse_mix(std::string_view name);  // case-insensitive

// What a tensor is, as far as llama-quantize's type choice is concerned.
enum class TensorKind {
  kTokenEmbd,
  kOutput,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOut,
  kFfnGateUp,
  kFfnDown,
  kRouter,
  kNorm,
  kBias,
  kSinks,
  kSelectionBias,  // exp_probs_b: large enough to change which experts are chosen
};

// The facts of a model that llama-quantize's type choice depends on.
struct MixModel {
  QuantMix mix = QuantMix::kQ4_K_M;
  Arch arch = Arch::kLlama;
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  bool has_output = true;  // false: the output head is tied to token_embd
};

// The type llama-quantize gives a tensor of `kind` in `layer` (-1 outside the layer stack)
// with ggml dimensions `ne` (three for stacked experts): llama.cpp's
// llama_tensor_get_type() for the mixes above. One rule for the synthetic files and the
// planner's synthetic shapes (scheduler/testing/shapes.h).
gguf::GgmlType mix_type(const MixModel& model, TensorKind kind, int64_t layer,
                        const std::vector<int64_t>& ne);

// deepseek2's extras: multi-head latent attention (head_dim of the Shape is qk_nope +
// qk_rope, n_rot its qk_rope), its routing and YaRN keys; the shared experts, leading
// dense layers and weights scale are the Shape's.
struct Mla {
  int64_t q_lora_rank = 0;  // 0: attn_q straight from n_embd (V2-Lite)
  int64_t kv_lora_rank = 0;
  int64_t v_head_dim = 0;
  int64_t n_group = 0, n_group_used = 0;  // group-limited top-k; 0: not written
  bool sigmoid = false;                   // sigmoid gating with exp_probs_b (V3); softmax otherwise
  bool weights_norm = false;              // expert weights renormalised to sum 1
  float yarn_factor = 0.0f;               // 0: no rope scaling
  int64_t yarn_orig_ctx = 0;
  float yarn_mscale_all_dim = 0.0f;
};

// Model dimensions, in the project's one vocabulary. 0 in n_vocab means "the vocabulary
// source's size"; 0 in head_dim means n_embd / n_head.
struct Shape {
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;      // dense FFN width (for qwen3moe: metadata only)
  int64_t n_expert = 0;  // 0 for dense models
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;  // width of one expert's FFN
  // glm4moe and deepseek2: partial RoPE (deepseek2: the qk_rope dims of each head), shared
  // experts, leading dense layers (a dense FFN of n_ff), the routed weights' scale;
  // glm4moe only: NextN layers after the n_layer of the model (written, never run).
  int64_t n_rot = 0;  // rotated dims per head; 0: head_dim
  int64_t n_expert_shared = 0;
  int64_t n_dense_lead = 0;
  int64_t n_nextn = 0;
  double expert_weights_scale = 1.0;
  int64_t n_ctx = 4096;       // context_length written to metadata
  double rope_freq_base = 0;  // 0: the architecture's usual value
  Mla mla;                    // deepseek2 only
  int64_t n_swa = 0;          // sliding window of local layers (gpt-oss); 0: 128
};

struct Preset {
  std::string name;
  Arch default_arch;
  Shape shape;
};
// tiny, 1b, 8b, moe, 70b, mixtral-8x7b, qwen3-30b-a3b, deepseek-v3, deepseek-v2-lite,
// deepseek2-tiny, deepseek2-lite-tiny, gpt-oss-20b, gpt-oss-120b, gpt-oss-tiny, glm-4.5-air,
// glm4moe-tiny (shapes in SPEC.md section 5 and docs/MODELS.md).
const std::vector<Preset>& presets();
Result<Preset> find_preset(std::string_view name);
// The preset's shape for `arch`: dense architectures drop the expert fields; a MoE
// architecture needs a preset with experts (tiny has both).
Result<Shape> preset_shape(const Preset& preset, Arch arch);

struct SynthSpec {
  Arch arch = Arch::kLlama;
  Shape shape;
  QuantMix mix = QuantMix::kQ4_K_M;
  std::string vocab_from;  // a GGUF whose tokenizer.* metadata is copied
  // Non-empty: written as tokenizer.chat_template instead of the vocabulary source's
  // (hypura synth gives gpt-oss files on a harmony vocabulary gpt-oss's own).
  std::string chat_template;
  uint64_t seed = 42;
  bool tied_embeddings = false;  // no output.weight: the head reuses token_embd (gemma3 always)
  // Multiplies the output head's weight std (the tied token_embd's when there is no output):
  // reference models use 3 so logits have std ~3 and clear top-1 margins.
  double logit_scale = 1.0;
  std::string name = "synthetic";  // general.name
  bool header_only = false;        // write_model: tensor data left as a hole (zeros), for planning
};

// Checks the spec for shapes the architecture or the mix cannot hold; fills head_dim.
Result<SynthSpec> validate(SynthSpec spec);

// One tensor of the planned file.
struct TensorPlan {
  std::string name;  // llama.cpp's name, e.g. "blk.3.ffn_down.weight"
  gguf::GgmlType type;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the row length (fan-in)
  ValueSpec values;         // distribution of the dequantized values
};

// The tensors of the model in file order: token_embd, blk.0..n-1, output_norm, output.
// REQUIRES: spec passed validate() and shape.n_vocab > 0 (resolved from the Vocab).
std::vector<TensorPlan> plan_tensors(const SynthSpec& spec);

// The tokenizer.* metadata of a real model resized to n_vocab tokens (0 keeps its size):
// larger vocabularies are padded with "<unused_N>" tokens (type UNUSED), smaller ones
// truncated (BPE merges whose parts or result fall outside are dropped). Fails when a
// special token id would fall outside the new vocabulary.
struct Vocab {
  int64_t n_vocab = 0;
  std::vector<std::pair<std::string, gguf::Value>> entries;  // tokenizer.* keys, in source order
};
Result<Vocab> load_vocab(const std::string& path, int64_t n_vocab);

// The default vocabulary source for an architecture and vocabulary size, among the real
// models in `models_dir` (scripts/fetch-models.sh): Gemma's SentencePiece vocabulary for
// gemma3, Qwen2.5's BPE for the qwen family, SmolLM2's BPE otherwise. "" when missing.
std::string default_vocab_source(Arch arch, const std::string& models_dir);

// Totals of a planned file (bytes of tensor data, parameters).
struct SynthSummary {
  uint64_t data_bytes = 0;
  uint64_t n_params = 0;
  size_t n_tensors = 0;
};
SynthSummary summarize(const std::vector<TensorPlan>& tensors);

// Writes the model to `path`: metadata for the architecture, the vocabulary's tokenizer
// keys, then every planned tensor. progress(done, total) reports tensor-data bytes.
// REQUIRES: spec passed validate(); spec.shape.n_vocab == vocab.n_vocab.
Status write_model(const SynthSpec& spec, const Vocab& vocab, const std::string& path,
                   const std::function<void(uint64_t done, uint64_t total)>& progress = {});

}  // namespace hypura::synth
