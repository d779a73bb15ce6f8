// Tokenizer: text <-> token ids for a model, from its GGUF metadata.
//
// Two families, chosen by tokenizer.ggml.model (see vocab.h for the keys):
//   "llama" SentencePiece-style merges by score with <0xNN> byte fallback (spm.h):
//           Llama 2, Mistral, Gemma, Phi-3.
//   "gpt2"  byte-level BPE with a regex pre-tokenizer and ranked merges (bpe.h):
//           GPT-2, Llama 3, Qwen2, SmolLM, DeepSeek.
// Both reproduce llama.cpp's llama_tokenize / llama_token_to_piece exactly (tested
// against llama.cpp's expected ids in ../shared/golden/tokenizer/).
//
// Special tokens: before the model's own algorithm runs, text is split on the texts of
// user-defined tokens and, with parse_special, of control tokens (<|im_start|>, <s>),
// longest token first; each such match becomes that token's id. For Phi-3 models (by
// general.name, as llama.cpp does) whitespace right after a special token is dropped.
//
// Thread-safety: immutable after construction; every method may run concurrently.
// token_to_piece() returns references into a cache built at load, so streaming output
// neither allocates nor recomputes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "tokenizer/prompt_text.h"
#include "tokenizer/token_index.h"
#include "tokenizer/vocab.h"

namespace hypura::gguf {
class Metadata;
}

namespace hypura::tokenizer {

class SpmEncoder;
class BpeEncoder;

class Tokenizer {
 public:
  // Fails (with the key or value named) on missing arrays, an unsupported model type
  // or a pre-tokenizer regex that does not compile.
  static Result<std::unique_ptr<Tokenizer>> from_metadata(const gguf::Metadata& metadata);
  static Result<std::unique_ptr<Tokenizer>> from_vocab(Vocab vocab);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`. add_special: prepend BOS / append EOS as the model's
  // add_bos_token / add_eos_token say. parse_special: control-token texts in `text`
  // (e.g. "<|im_start|>") become those tokens; otherwise they are tokenized as plain
  // text. Chat prompts use the PromptText overload instead.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // A rendered chat prompt: control tokens are parsed in the template's text only, never
  // where a match would touch a data range (a message), where they are plain text.
  std::vector<int32_t> encode(const PromptText& prompt, bool add_special) const;

  // The bytes token `id` stands for (possibly an incomplete UTF-8 sequence: byte tokens
  // and byte-level BPE pieces split characters; StreamingDetokenizer reassembles them).
  // Control and unknown tokens give "" unless `special`, then their text. An id out of
  // range gives "".
  const std::string& token_to_piece(int32_t id, bool special = false) const;

  // All pieces concatenated, as llama.cpp's llama_detokenize: remove_special drops a
  // leading BOS / trailing EOS that add_special would add; SPM drops the leading space
  // that add_space_prefix introduced. No space clean-up pass.
  std::string detokenize(std::span<const int32_t> ids, bool remove_special = false,
                         bool unparse_special = false) const;

  int32_t n_vocab() const { return vocab_.n_vocab(); }
  int32_t bos_id() const { return vocab_.bos_id; }  // -1: none
  int32_t eos_id() const { return vocab_.eos_id; }
  int32_t eot_id() const { return vocab_.eot_id; }
  bool add_bos() const { return vocab_.add_bos; }
  bool add_eos() const { return vocab_.add_eos; }
  VocabModel model() const { return vocab_.model; }
  // True for EOS, EOT, EOM and end-of-turn tokens known by text (<|im_end|>,
  // <end_of_turn>, <|eot_id|>, <|end|>, <|endoftext|>, ...).
  bool is_end_of_generation(int32_t id) const { return eog_ids_.count(id) != 0; }
  const std::unordered_set<int32_t>& end_of_generation_ids() const { return eog_ids_; }
  bool is_control(int32_t id) const;

  // The raw vocabulary text of a token ("" when out of range).
  const std::string& token_text(int32_t id) const;
  // Id of the token whose raw text is exactly `text`, or -1.
  int32_t find_token(std::string_view text) const { return index_.find(text); }
  const std::string& chat_template() const { return vocab_.chat_template; }
  // The vocabulary carries harmony's message markup (gpt-oss's <|start|>, <|channel|>,
  // <|message|>): prompts and replies are written in channels (server/harmony.h).
  bool harmony() const { return harmony_; }
  const Vocab& vocab() const { return vocab_; }

 private:
  explicit Tokenizer(Vocab vocab);
  Status init();
  void find_end_of_generation_tokens();
  void apply_harmony_rules();
  void build_pieces();
  void set_strip_flags();

  struct Fragment {
    int32_t token;  // >= 0: a special token; -1: raw text [offset, offset + length)
    size_t offset;
    size_t length;
  };
  // Control tokens are matched with parse_special, and only where they touch no range of
  // `data`; user-defined tokens everywhere.
  std::vector<Fragment> partition_special(std::string_view text, bool parse_special,
                                          std::span<const TextRange> data) const;
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special,
                              std::span<const TextRange> data) const;
  std::unordered_set<std::string_view> specials_in(std::string_view text) const;
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const;

  Vocab vocab_;
  TokenIndex index_;
  std::unique_ptr<SpmEncoder> spm_;
  std::unique_ptr<BpeEncoder> bpe_;
  std::vector<int32_t> special_ids_;        // control/user-defined/unknown, longest text first
  std::unordered_set<int32_t> rstrip_ids_;  // specials that eat the whitespace after them
  // Which special texts occur in a text is found in one scan: at each byte that starts
  // some special text, look up the candidate lengths in this set.
  std::unordered_set<std::string_view> special_texts_;
  std::vector<size_t> special_lengths_;         // distinct lengths, ascending
  std::array<bool, 256> special_first_byte_{};  // byte starts some special text
  std::vector<std::string> pieces_;             // (n_vocab) token_to_piece(id, special = false)
  std::unordered_set<int32_t> eog_ids_;
  bool harmony_ = false;
};

}  // namespace hypura::tokenizer
