#include "tokenizer/tokenizer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"

namespace hypura::tokenizer {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

// End-of-turn token texts, in the order we prefer one as *the* EOT id.
constexpr std::string_view kEotTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "<|end_of_text|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "<\xEF\xBD\x9C"
                                          "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                          "<end_of_utterance>"};
// Texts of tokens that end generation, whatever the metadata says (llama.cpp's list).
constexpr std::string_view kEogTexts[] = {"<|eot_id|>",    "<|im_end|>",      "<|end|>",
                                          "<|return|>",    "<|call|>",        "<end_of_turn>",
                                          "<|endoftext|>", "<|eom_id|>",      "<EOT>",
                                          "_<EOT>",        "<|end_of_text|>", "<end_of_utterance>"};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t m; (m = s.find(from, pos)) != std::string::npos; pos = m + from.size()) {
    out.append(s, pos, m - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Whether [begin, end) overlaps a range of `data` (ascending, disjoint).
bool touches(std::span<const TextRange> data, size_t begin, size_t end) {
  auto it = std::upper_bound(data.begin(), data.end(), begin,
                             [](size_t pos, const TextRange& r) { return pos < r.end; });
  return it != data.end() && it->begin < end;
}

const std::string& empty_string() {
  static const std::string kEmpty;
  return kEmpty;
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(Vocab vocab) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer(std::move(vocab)));
  HYPURA_RETURN_IF_ERROR(tok->init());
  return tok;
}

Status Tokenizer::init() {
  const size_t n = vocab_.tokens.size();
  if (n == 0) return invalid_argument("tokenizer: empty vocabulary");
  if (!vocab_.scores.empty() && vocab_.scores.size() != n) {
    return invalid_argument("tokenizer: scores length differs from tokens");
  }
  if (!vocab_.types.empty() && vocab_.types.size() != n) {
    return invalid_argument("tokenizer: token types length differs from tokens");
  }
  vocab_.types.resize(n, TokenType::kNormal);
  for (int32_t* id : {&vocab_.bos_id, &vocab_.eos_id, &vocab_.unk_id, &vocab_.pad_id,
                      &vocab_.eot_id, &vocab_.eom_id}) {
    if (*id >= static_cast<int32_t>(n)) *id = -1;
  }
  index_ = TokenIndex(vocab_.tokens);
  find_end_of_generation_tokens();
  apply_harmony_rules();

  if (vocab_.model == VocabModel::kSpm) {
    spm_ = std::make_unique<SpmEncoder>(vocab_, index_);
  } else {
    HYPURA_ASSIGN_OR_RETURN(bpe_, BpeEncoder::create(vocab_, index_));
  }

  for (size_t id = 0; id < n; ++id) {
    const TokenType t = vocab_.types[id];
    if ((t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) &&
        !vocab_.tokens[id].empty()) {
      special_ids_.push_back(static_cast<int32_t>(id));
    }
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[a].size() > vocab_.tokens[b].size();
  });
  for (int32_t id : special_ids_) {
    const std::string& t = vocab_.tokens[id];
    special_texts_.insert(t);
    special_first_byte_[static_cast<uint8_t>(t[0])] = true;
    special_lengths_.push_back(t.size());
  }
  std::sort(special_lengths_.begin(), special_lengths_.end());
  special_lengths_.erase(std::unique(special_lengths_.begin(), special_lengths_.end()),
                         special_lengths_.end());
  build_pieces();
  set_strip_flags();
  return Status::ok();
}

// Phi-3's tokenizer strips whitespace to the right of its special tokens (except <unk>,
// <s>, <|endoftext|>); llama.cpp keys this on the model name, and so do we.
void Tokenizer::set_strip_flags() {
  const std::string& name = vocab_.model_name;
  if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return;
  rstrip_ids_.insert(special_ids_.begin(), special_ids_.end());
  if (int32_t id = index_.find("</s>"); id >= 0) rstrip_ids_.insert(id);
  for (std::string_view keep : {"<unk>", "<s>", "<|endoftext|>"}) {
    if (int32_t id = index_.find(keep); id >= 0) rstrip_ids_.erase(id);
  }
}

// Models mark their end-of-turn tokens inconsistently, so (like llama.cpp) we also
// recognise them by text, and make them control tokens so they are never printed.
void Tokenizer::find_end_of_generation_tokens() {
  auto force_control = [&](int32_t id) {
    if (vocab_.types[id] != TokenType::kControl) {
      spdlog::debug("tokenizer: treating '{}' ({}) as a control token", vocab_.tokens[id], id);
      vocab_.types[id] = TokenType::kControl;
    }
  };
  if (vocab_.eot_id < 0) {
    for (std::string_view text : kEotTexts) {
      const int32_t id = index_.find(text);
      if (id >= 0) {
        vocab_.eot_id = id;
        force_control(id);
        break;
      }
    }
  }
  if (vocab_.eom_id < 0) vocab_.eom_id = index_.find("<|eom_id|>");
  for (std::string_view text : kEogTexts) {
    const int32_t id = index_.find(text);
    if (id >= 0) {
      eog_ids_.insert(id);
      force_control(id);
    }
  }
  for (int32_t id : {vocab_.eos_id, vocab_.eot_id, vocab_.eom_id}) {
    if (id >= 0) eog_ids_.insert(id);
  }
}

// o200k_harmony (gpt-oss), as llama.cpp does: the message markup tokens are user-defined
// (matched without parse_special, printed) so a reply's markup reaches its parser; when
// <|return|> and <|call|> end a turn, <|end|> only closes one message and is printed too.
void Tokenizer::apply_harmony_rules() {
  harmony_ = index_.find("<|start|>") >= 0 && index_.find("<|channel|>") >= 0 &&
             index_.find("<|message|>") >= 0;
  for (std::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const int32_t id = index_.find(text); id >= 0) vocab_.types[id] = TokenType::kUserDefined;
  }
  auto ends_generation = [&](std::string_view text) {
    const int32_t id = index_.find(text);
    return id >= 0 && eog_ids_.count(id) != 0;
  };
  if (ends_generation("<|end|>") && ends_generation("<|return|>") && ends_generation("<|call|>")) {
    const int32_t end = index_.find("<|end|>");
    eog_ids_.erase(end);
    vocab_.types[end] = TokenType::kUserDefined;
    if (vocab_.eot_id == end) vocab_.eot_id = -1;
  }
}

void Tokenizer::build_pieces() {
  pieces_.resize(vocab_.tokens.size());
  for (size_t id = 0; id < pieces_.size(); ++id) {
    const std::string& text = vocab_.tokens[id];
    switch (vocab_.types[id]) {
      case TokenType::kUserDefined:
        pieces_[id] = text;
        break;
      case TokenType::kNormal:
        if (vocab_.model == VocabModel::kSpm) {
          pieces_[id] = text;
          replace_all(pieces_[id], kSpmSpace, " ");
        } else {
          pieces_[id] = bpe_text_to_bytes(text);
        }
        break;
      case TokenType::kByte:
        if (vocab_.model == VocabModel::kSpm && text.size() == 6 && text.starts_with("<0x")) {
          pieces_[id] = std::string(
              1, static_cast<char>(std::strtol(text.substr(3, 2).c_str(), nullptr, 16)));
        } else {
          pieces_[id] = bpe_text_to_bytes(text);
        }
        break;
      default:  // control, unknown, unused: printed only as special text, if at all
        break;
    }
  }
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < n_vocab() && vocab_.types[id] == TokenType::kControl;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  return (id >= 0 && id < n_vocab()) ? vocab_.tokens[id] : empty_string();
}

const std::string& Tokenizer::token_to_piece(int32_t id, bool special) const {
  if (id < 0 || id >= n_vocab()) return empty_string();
  const TokenType t = vocab_.types[id];
  if (special && (t == TokenType::kControl || t == TokenType::kUnknown)) return vocab_.tokens[id];
  return pieces_[id];
}

// The special-token texts that occur somewhere in `text`.
std::unordered_set<std::string_view> Tokenizer::specials_in(std::string_view text) const {
  std::unordered_set<std::string_view> found;
  for (size_t p = 0; p < text.size(); ++p) {
    if (!special_first_byte_[static_cast<uint8_t>(text[p])]) continue;
    for (size_t len : special_lengths_) {
      if (p + len > text.size()) break;
      auto it = special_texts_.find(text.substr(p, len));
      if (it != special_texts_.end()) found.insert(*it);
    }
  }
  return found;
}

// Splits `text` on special-token texts the way llama.cpp's tokenizer_st_partition does:
// each special token in turn (longest first) splits every remaining raw-text fragment at
// each of its occurrences.
std::vector<Tokenizer::Fragment> Tokenizer::partition_special(
    std::string_view text, bool parse_special, std::span<const TextRange> data) const {
  std::vector<Fragment> frags = {{-1, 0, text.size()}};
  const auto present = specials_in(text);
  if (present.empty()) return frags;
  std::vector<Fragment> next;
  for (int32_t id : special_ids_) {
    const TokenType t = vocab_.types[id];
    if (!parse_special && t != TokenType::kUserDefined) continue;
    const std::string& tok = vocab_.tokens[id];
    if (present.count(tok) == 0) continue;
    const bool rstrip = rstrip_ids_.count(id) != 0;
    const bool in_data_too = t == TokenType::kUserDefined;  // as without parse_special
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const size_t end = f.offset + f.length;
      const std::string_view window = text.substr(0, end);
      size_t pos = f.offset;
      for (size_t m = pos; (m = window.find(tok, m)) != std::string_view::npos;) {
        if (!in_data_too && touches(data, m, m + tok.size())) {
          ++m;  // text inside a message: not a token
          continue;
        }
        if (m > pos) next.push_back({-1, pos, m - pos});
        next.push_back({id, m, tok.size()});
        pos = m + tok.size();
        while (rstrip && pos < end && is_ascii_space(text[pos])) ++pos;
        m = pos;
      }
      if (pos < end) next.push_back({-1, pos, end - pos});
    }
    frags.swap(next);
  }
  return frags;
}

void Tokenizer::encode_text(std::string_view text, bool after_special,
                            std::vector<int32_t>& out) const {
  if (spm_) {
    std::string escaped;
    escaped.reserve(text.size() + 1);
    // push_back, not = " ": GCC 12 reports a false -Wrestrict for that under sanitizers.
    if (vocab_.add_space_prefix && after_special) escaped.push_back(' ');
    escaped.append(text);
    replace_all(escaped, " ", kSpmSpace);
    spm_->encode(escaped, out);
  } else {
    // Invalid UTF-8 becomes U+FFFD, as llama.cpp's codepoint decoding does.
    bpe_->encode(utf8_sanitize(text), out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  return encode(text, add_special, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode(const PromptText& prompt, bool add_special) const {
  return encode(prompt.text, add_special, /*parse_special=*/true, prompt.data);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                       std::span<const TextRange> data) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  if (!text.empty()) {
    bool after_special = true;  // the text start counts as following a special token
    for (const Fragment& f : partition_special(text, parse_special, data)) {
      if (f.token >= 0) {
        out.push_back(f.token);
        after_special = true;
      } else {
        encode_text(text.substr(f.offset, f.length), after_special, out);
        after_special = false;
      }
    }
  }
  if (add_special && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
  return out;
}

std::string Tokenizer::detokenize(std::span<const int32_t> ids, bool remove_special,
                                  bool unparse_special) const {
  // llama.cpp strips the space add_space_prefix added, except after a removed BOS.
  bool strip_space = vocab_.add_space_prefix;
  if (remove_special && vocab_.add_bos && !ids.empty() && ids.front() == vocab_.bos_id) {
    strip_space = false;
    ids = ids.subspan(1);
  }
  if (remove_special && vocab_.add_eos && !ids.empty() && ids.back() == vocab_.eos_id) {
    ids = ids.first(ids.size() - 1);
  }
  std::string out;
  for (int32_t id : ids) {
    std::string_view piece = token_to_piece(id, unparse_special);
    if (strip_space && piece.starts_with(' ')) piece.remove_prefix(1);
    strip_space = false;
    out.append(piece);
  }
  return out;
}

}  // namespace hypura::tokenizer
