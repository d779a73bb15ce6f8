// Vocab from GGUF metadata, with llama.cpp's defaults for keys a file omits.
#include <cctype>
#include <string_view>

#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace hypura::tokenizer {
namespace {

constexpr std::string_view kPrefix = "tokenizer.ggml.";

std::string key(std::string_view name) {
  return std::string(kPrefix) + std::string(name);
}

Status read_strings(const gguf::Metadata& md, std::string_view name, bool required,
                    std::vector<std::string>* out) {
  const auto* arr = md.get_array(key(name));
  if (arr == nullptr) {
    return required ? not_found("missing metadata key " + key(name)) : Status::ok();
  }
  out->reserve(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) {
    const std::string* s = (*arr)[i].as_string();
    if (s == nullptr) return corrupt(key(name) + "[" + std::to_string(i) + "] is not a string");
    out->push_back(*s);
  }
  return Status::ok();
}

Status read_scores(const gguf::Metadata& md, size_t n_vocab, std::vector<float>* out) {
  const auto* arr = md.get_array(key("scores"));
  if (arr == nullptr) return Status::ok();
  if (arr->size() != n_vocab) return corrupt(key("scores") + " length differs from tokens");
  out->reserve(n_vocab);
  for (size_t i = 0; i < arr->size(); ++i) {
    auto v = (*arr)[i].as_f64();
    if (!v) return corrupt(key("scores") + "[" + std::to_string(i) + "] is not a number");
    out->push_back(static_cast<float>(*v));
  }
  return Status::ok();
}

Status read_types(const gguf::Metadata& md, size_t n_vocab, std::vector<TokenType>* out) {
  const auto* arr = md.get_array(key("token_type"));
  if (arr == nullptr) return Status::ok();
  if (arr->size() != n_vocab) return corrupt(key("token_type") + " length differs from tokens");
  out->reserve(n_vocab);
  for (size_t i = 0; i < arr->size(); ++i) {
    auto v = (*arr)[i].as_i64();
    if (!v || *v < 0 || *v > 6) {
      return corrupt(key("token_type") + "[" + std::to_string(i) + "] is not a token type 0-6");
    }
    out->push_back(static_cast<TokenType>(*v));
  }
  return Status::ok();
}

// Reads an optional token id; ids outside the vocabulary are dropped (llama.cpp warns
// and does the same), so a bad file cannot make us index out of range.
void read_id(const gguf::Metadata& md, std::string_view name, int32_t n_vocab, int32_t* id) {
  auto v = md.get_u64(key(name));
  if (!v) return;
  *id = (*v < static_cast<uint64_t>(n_vocab)) ? static_cast<int32_t>(*v) : -1;
}

void read_flag(const gguf::Metadata& md, std::string_view name, bool* flag) {
  if (auto v = md.get_bool(key(name))) *flag = *v;
}

// BPE pre-tokenizers whose vocabularies expect a BOS by default.
bool bpe_adds_bos_by_default(const std::string& pre) {
  return pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" ||
         pre == "tekken" || pre == "chameleon";
}

Status set_model_defaults(const std::string& model, Vocab* v) {
  if (model == "llama") {
    v->model = VocabModel::kSpm;
    v->bos_id = 1;
    v->eos_id = 2;
    v->unk_id = 0;
    v->add_bos = true;
    v->add_space_prefix = true;
    return Status::ok();
  }
  if (model == "gpt2") {
    v->model = VocabModel::kBpe;
    v->bos_id = 11;
    v->eos_id = 11;
    v->add_bos = bpe_adds_bos_by_default(v->pre);
    // GLM-4 has no BOS unless the file names one ([gMASK], written by its chat template).
    if (v->pre == "glm4" || v->pre == "chatglm-bpe") v->bos_id = -1;
    return Status::ok();
  }
  return unsupported("tokenizer model '" + model +
                     "' is not supported (supported: llama (SentencePiece), gpt2 (BPE))");
}

}  // namespace

Result<Vocab> vocab_from_metadata(const gguf::Metadata& md) {
  Vocab v;
  auto model = md.get_string(key("model"));
  if (!model) return not_found("missing metadata key " + key("model"));
  if (auto pre = md.get_string(key("pre"))) v.pre = *pre;
  HYPURA_RETURN_IF_ERROR(set_model_defaults(*model, &v));

  HYPURA_RETURN_IF_ERROR(read_strings(md, "tokens", true, &v.tokens));
  if (v.tokens.empty()) return corrupt(key("tokens") + " is empty");
  if (v.tokens.size() > static_cast<size_t>(INT32_MAX)) return corrupt("vocabulary too large");
  HYPURA_RETURN_IF_ERROR(read_scores(md, v.tokens.size(), &v.scores));
  HYPURA_RETURN_IF_ERROR(read_types(md, v.tokens.size(), &v.types));
  if (v.model == VocabModel::kBpe) {
    HYPURA_RETURN_IF_ERROR(read_strings(md, "merges", true, &v.merges));
  }

  const int32_t n = v.n_vocab();
  if (v.bos_id >= n) v.bos_id = -1;
  if (v.eos_id >= n) v.eos_id = -1;
  if (v.unk_id >= n) v.unk_id = -1;
  read_id(md, "bos_token_id", n, &v.bos_id);
  read_id(md, "eos_token_id", n, &v.eos_id);
  read_id(md, "unknown_token_id", n, &v.unk_id);
  read_id(md, "padding_token_id", n, &v.pad_id);
  read_id(md, "eot_token_id", n, &v.eot_id);
  read_id(md, "eom_token_id", n, &v.eom_id);
  read_flag(md, "add_bos_token", &v.add_bos);
  read_flag(md, "add_eos_token", &v.add_eos);
  read_flag(md, "add_space_prefix", &v.add_space_prefix);
  if (auto t = md.get_string("tokenizer.chat_template")) v.chat_template = *t;
  if (auto name = md.get_string("general.name")) {
    v.model_name = *name;
    for (char& c : v.model_name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return v;
}

}  // namespace hypura::tokenizer
