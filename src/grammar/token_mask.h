// Constrained sampling over a model's vocabulary: which tokens may come next under a
// Grammar (json_schema.h).
//
// VocabIndex arranges the vocabulary once per model:
//   - a byte trie of every token's bytes, stored in preorder (node i's subtree is
//     [i, end[i])), so the mask walk feeds each shared prefix to the automaton once and
//     skips a whole subtree at the first byte the grammar refuses;
//   - per string substate (string_lexer.h), what each token does inside a JSON string:
//     stays inside (and how many characters it starts), leaves it through a closing quote,
//     or is refused. Inside a free string, where nearly every token is allowed and the trie
//     walk would visit the whole vocabulary, the mask is read from this table and only the
//     tokens that close the string are run through the automaton.
// Tokens whose bytes end inside a UTF-8 character are ordinary: the automaton holds the
// unfinished character and the next token must finish it. Tokens with no bytes (control
// tokens) are never allowed; end-of-generation tokens only when the document is whole.
//
// TokenMatcher is one generation's automaton state plus the scratch its mask walk needs
// (allocated at construction, so fill_mask and accept never allocate).
//
// Thread-safety: a VocabIndex is immutable and shared; a TokenMatcher belongs to one
// generation (one thread). Ownership: a TokenMatcher keeps its Grammar alive and refers to
// the VocabIndex, which must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/json_schema.h"

namespace hypura::grammar {

class VocabIndex {
 public:
  // pieces: (n_vocab) the bytes each token stands for ("" for tokens that carry none);
  // end_ids: the tokens that end generation.
  VocabIndex(std::span<const std::string> pieces, std::span<const int32_t> end_ids);

  int32_t n_vocab() const { return n_vocab_; }
  size_t max_piece_bytes() const { return max_piece_bytes_; }
  size_t n_trie_nodes() const { return byte_.size(); }
  std::string_view piece(int32_t id) const {
    return std::string_view(bytes_).substr(offset_[id], offset_[id + 1] - offset_[id]);
  }

 private:
  friend class TokenMatcher;
  void build_trie(std::span<const int32_t> end_ids);
  void build_string_tables();

  // What a token does from a string substate: kNotStay, or the characters it starts
  // (kCharsMask) plus kHasEscape when it starts a backslash escape.
  static constexpr uint16_t kNotStay = 0xFFFF;
  static constexpr uint16_t kHasEscape = 0x4000;
  static constexpr uint16_t kCharsMask = 0x3FFF;

  int32_t n_vocab_ = 0;
  size_t max_piece_bytes_ = 0;
  std::string bytes_;             // every piece, concatenated
  std::vector<uint32_t> offset_;  // (n_vocab + 1) piece id is bytes_[offset_[id], offset_[id + 1])
  std::vector<int32_t> end_ids_;
  // The trie, in preorder, without its root.
  std::vector<uint8_t> byte_;    // (n_nodes) the byte leading to the node
  std::vector<uint16_t> depth_;  // (n_nodes) 1 for the root's children
  std::vector<uint32_t> end_;    // (n_nodes) one past the node's subtree
  std::vector<uint32_t>
      first_token_;  // (n_nodes + 1) node i ends tokens_[first_token_[i], first_token_[i + 1])
  std::vector<int32_t> tokens_;
  // String tables, per substate s: stay_[s * n_vocab + id], and the tokens to check in full.
  std::vector<uint16_t> stay_;                 // (kStrSubCount * n_vocab)
  std::vector<std::vector<int32_t>> exits_;    // [s]: tokens reaching a closing quote
  std::vector<std::vector<int32_t>> escapes_;  // [s]: tokens that stay and hold an escape
};

class TokenMatcher {
 public:
  TokenMatcher(std::shared_ptr<const Grammar> grammar, const VocabIndex& vocab);

  // allowed: ((n_vocab + 63) / 64) words; bit id % 64 of word id / 64 is set when token id
  // may come next (end-of-generation tokens when the document is whole).
  void fill_mask(std::span<uint64_t> allowed);
  // Feeds token id's bytes; false (and the state unchanged) when the grammar refuses them.
  bool accept(int32_t id) { return accept_bytes(vocab_.piece(id)); }
  bool accept_bytes(std::string_view bytes);
  // The bytes so far are a whole document.
  bool accepts_end();
  // A whole document to which nothing can be added: generation may stop.
  bool finished();

 private:
  void fill_from_string_tables(const std::array<StringTop, kMaxThreads>& tops,
                               std::span<uint64_t> allowed);
  void fill_from_trie(std::span<uint64_t> allowed);
  bool token_allowed(int32_t id);
  State& cur() { return buffers_[cur_]; }
  State& scratch(int k) { return buffers_[(cur_ + 1 + k) % 3]; }

  std::shared_ptr<const Grammar> grammar_;
  const VocabIndex& vocab_;
  std::unique_ptr<State[]> buffers_;  // (3) the state, and two scratch states
  int cur_ = 0;
  std::unique_ptr<State[]> walk_;  // (max_piece_bytes + 1) the state after each trie depth
};

}  // namespace hypura::grammar
