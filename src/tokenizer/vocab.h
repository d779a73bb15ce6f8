// Vocab: the tokenizer description a GGUF file carries under tokenizer.ggml.*.
//
// A plain value type, so tests can build small vocabularies by hand. The GGUF keys it
// comes from (read by vocab_from_metadata, in vocab_metadata.cc):
//   tokenizer.ggml.model        "llama" (SentencePiece) or "gpt2" (byte-level BPE)
//   tokenizer.ggml.pre          BPE pre-tokenizer name ("gpt-2", "llama-bpe", "qwen2", ...)
//   tokenizer.ggml.tokens       [string] token texts; SPM writes spaces as U+2581 "▁",
//                               BPE writes bytes through GPT-2's byte->unicode table
//   tokenizer.ggml.scores       [f32] SPM merge priority (higher merges first)
//   tokenizer.ggml.token_type   [i32] TokenType below
//   tokenizer.ggml.merges       [string] BPE merges "left right", rank = index
//   tokenizer.ggml.{bos,eos,unknown,padding,eot,eom}_token_id
//   tokenizer.ggml.add_bos_token, add_eos_token, add_space_prefix
//   tokenizer.chat_template     Jinja text (see chat_template.h)
//   general.name                model name (Phi-3 strips whitespace after specials)
// Missing keys take llama.cpp's defaults for the model type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hypura::gguf {
class Metadata;
}

namespace hypura::tokenizer {

// GGUF token types (llama.cpp's numbering).
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <s>, <|im_end|>: matched in text only with parse_special
  kUserDefined = 4,  // always matched in text as a whole, printed verbatim
  kUnused = 5,
  kByte = 6,  // SPM byte fallback <0xNN>
};

enum class VocabModel { kSpm, kBpe };

struct Vocab {
  VocabModel model = VocabModel::kSpm;
  std::string pre = "default";      // BPE pre-tokenizer name
  std::vector<std::string> tokens;  // (n_vocab) token texts
  std::vector<float> scores;        // (n_vocab) or empty (then all 0)
  std::vector<TokenType> types;     // (n_vocab) or empty (then all kNormal)
  std::vector<std::string> merges;  // BPE only: "left right" in rank order

  int32_t bos_id = -1;  // -1: none
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  int32_t eot_id = -1;  // end of turn; found by text when the file omits it
  int32_t eom_id = -1;

  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: prepend "▁" to text at start/after a special token
  std::string chat_template;      // empty when the file has none
  std::string model_name;         // general.name, lowercased: per-model quirks key on it

  int32_t n_vocab() const { return static_cast<int32_t>(tokens.size()); }
};

// Reads a Vocab from GGUF metadata; fails with a message naming the key when the
// tokenizer model is missing or unsupported, or arrays are missing or inconsistent.
Result<Vocab> vocab_from_metadata(const gguf::Metadata& metadata);

}  // namespace hypura::tokenizer
