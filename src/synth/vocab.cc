// Tokenizer metadata copied from a real model and resized to a synthetic model's shape.
#include <filesystem>
#include <string_view>
#include <unordered_set>

#include "synth/synth.h"

namespace hypura::synth {
namespace {

using gguf::Value;
using gguf::ValueType;

constexpr int32_t kTokenTypeUnused = 5;   // llama_token_type: UNUSED
constexpr float kUnusedScore = -1000.0f;  // never preferred by a SentencePiece search

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Value scalar(ValueType type, auto v) {
  Value out;
  out.type = type;
  out.data = v;
  return out;
}

// The value a padding token gets in a per-token array of element type `type`.
Value padding_value(ValueType type, const std::string& token) {
  switch (type) {
    case ValueType::STRING:
      return scalar(type, token);
    case ValueType::FLOAT32:
    case ValueType::FLOAT64:
      return scalar(type, double{kUnusedScore});
    default:
      return scalar(type, int64_t{kTokenTypeUnused});
  }
}

// Token strings after resizing, for the merge filter and to keep padding names unique.
std::unordered_set<std::string> token_set(const std::vector<Value>& tokens) {
  std::unordered_set<std::string> set;
  set.reserve(tokens.size());
  for (const Value& t : tokens) {
    if (const std::string* s = t.as_string()) set.insert(*s);
  }
  return set;
}

// "<unused_K>" names for ids [n_src, n), skipping any that a real token already uses.
std::vector<std::string> padding_names(const std::vector<Value>& tokens, size_t n) {
  std::unordered_set<std::string> taken = token_set(tokens);
  std::vector<std::string> names;
  for (size_t k = 0; names.size() + tokens.size() < n; ++k) {
    std::string name = "<unused_" + std::to_string(k) + ">";
    if (!taken.count(name)) names.push_back(std::move(name));
  }
  return names;
}

// BPE merges "left right" survive truncation when both parts and the result are kept.
std::vector<Value> filter_merges(const std::vector<Value>& merges,
                                 const std::unordered_set<std::string>& kept) {
  std::vector<Value> out;
  for (const Value& m : merges) {
    const std::string* s = m.as_string();
    if (s == nullptr) continue;
    size_t space = s->find(' ', 1);
    if (space == std::string::npos) continue;
    std::string left = s->substr(0, space);
    std::string right = s->substr(space + 1);
    if (kept.count(left) && kept.count(right) && kept.count(left + right)) out.push_back(m);
  }
  return out;
}

Value* find_entry(Vocab& vocab, std::string_view key) {
  for (auto& [k, v] : vocab.entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

// After truncation, BPE merges that reach past the kept tokens would make the tokenizer
// produce ids outside the vocabulary.
void drop_lost_merges(Vocab& vocab) {
  Value* tokens = find_entry(vocab, "tokenizer.ggml.tokens");
  Value* merges = find_entry(vocab, "tokenizer.ggml.merges");
  if (tokens == nullptr || merges == nullptr || merges->as_array() == nullptr) return;
  merges->data = filter_merges(*merges->as_array(), token_set(*tokens->as_array()));
}

class Resizer {
 public:
  Resizer(size_t n_src, size_t n, std::vector<std::string> padding)
      : n_src_(n_src), n_(n), padding_(std::move(padding)) {}

  // Per-token arrays (tokens, scores, token_type) are cut or padded to n entries.
  Value resize_per_token(const Value& array) const {
    std::vector<Value> elements = *array.as_array();
    if (elements.size() != n_src_) return array;  // not per-token: leave it alone
    if (n_ < n_src_) elements.resize(n_);
    for (size_t i = n_src_; i < n_; ++i) {
      elements.push_back(padding_value(array.array_type, padding_[i - n_src_]));
    }
    Value out = array;
    out.data = std::move(elements);
    return out;
  }

 private:
  size_t n_src_;
  size_t n_;
  std::vector<std::string> padding_;
};

Status check_special_ids(const std::vector<std::pair<std::string, Value>>& entries, size_t n) {
  for (const auto& [key, value] : entries) {
    if (!ends_with(key, "_token_id")) continue;
    std::optional<uint64_t> id = value.as_u64();
    if (id && *id >= n) {
      return invalid_argument(key + " = " + std::to_string(*id) + " does not fit a vocabulary of " +
                              std::to_string(n) +
                              " tokens; choose a larger --n-vocab or "
                              "another --vocab-from");
    }
  }
  return Status::ok();
}

}  // namespace

Result<Vocab> load_vocab(const std::string& path, int64_t n_vocab) {
  HYPURA_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::open(path));
  const std::vector<Value>* tokens = file.metadata().get_array("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->empty()) {
    return not_found(path + ": no tokenizer.ggml.tokens to copy");
  }
  const size_t n_src = tokens->size();
  const size_t n = n_vocab > 0 ? static_cast<size_t>(n_vocab) : n_src;
  Resizer resizer(n_src, n, n > n_src ? padding_names(*tokens, n) : std::vector<std::string>{});

  Vocab vocab;
  vocab.n_vocab = static_cast<int64_t>(n);
  for (const auto& [key, value] : file.metadata().entries()) {
    if (!starts_with(key, "tokenizer.")) continue;
    if (value.type == ValueType::ARRAY && key != "tokenizer.ggml.merges") {
      vocab.entries.emplace_back(key, resizer.resize_per_token(value));
    } else {
      vocab.entries.emplace_back(key, value);
    }
  }
  if (n < n_src) drop_lost_merges(vocab);
  HYPURA_RETURN_IF_ERROR(check_special_ids(vocab.entries, n));
  return vocab;
}

std::string default_vocab_source(Arch arch, const std::string& models_dir) {
  const char* file = "smollm2-135m-instruct-q4_1.gguf";
  if (arch == Arch::kGemma3) file = "gemma-3-270m-q4_k_m.gguf";
  if (arch == Arch::kQwen2 || arch == Arch::kQwen3 || arch == Arch::kQwen3Moe) {
    file = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
  }
  std::filesystem::path p = std::filesystem::path(models_dir) / file;
  return std::filesystem::exists(p) ? p.string() : "";
}

}  // namespace hypura::synth
