#include "grammar/token_mask.h"

#include <algorithm>
#include <cassert>
#include <numeric>

namespace hypura::grammar {

VocabIndex::VocabIndex(std::span<const std::string> pieces, std::span<const int32_t> end_ids)
    : n_vocab_(static_cast<int32_t>(pieces.size())), end_ids_(end_ids.begin(), end_ids.end()) {
  offset_.reserve(pieces.size() + 1);
  offset_.push_back(0);
  for (const std::string& p : pieces) {
    bytes_ += p;
    offset_.push_back(static_cast<uint32_t>(bytes_.size()));
    max_piece_bytes_ = std::max(max_piece_bytes_, p.size());
  }
  build_trie(end_ids);
  build_string_tables();
}

// Sorted pieces share prefixes with their neighbours: each piece adds the nodes past its
// common prefix with the one before, in preorder.
void VocabIndex::build_trie(std::span<const int32_t> end_ids) {
  std::vector<uint8_t> is_end(static_cast<size_t>(n_vocab_));
  for (int32_t id : end_ids) {
    if (id >= 0 && id < n_vocab_) is_end[id] = 1;
  }
  std::vector<int32_t> order;
  for (int32_t id = 0; id < n_vocab_; ++id) {
    if (!is_end[id] && !piece(id).empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [this](int32_t a, int32_t b) {
    const int c = piece(a).compare(piece(b));
    return c < 0 || (c == 0 && a < b);
  });
  std::vector<uint32_t> open;  // node of each depth of the previous piece
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view p = piece(id);
    size_t common = 0;
    while (common < prev.size() && common < p.size() && prev[common] == p[common]) ++common;
    while (open.size() > common) {
      end_[open.back()] = static_cast<uint32_t>(byte_.size());
      open.pop_back();
    }
    for (size_t k = common; k < p.size(); ++k) {
      open.push_back(static_cast<uint32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(p[k]));
      depth_.push_back(static_cast<uint16_t>(k + 1));
      end_.push_back(0);
      first_token_.push_back(static_cast<uint32_t>(tokens_.size()));
    }
    tokens_.push_back(id);  // the newest node is p's (a duplicate piece reuses it)
    prev = p;
  }
  for (uint32_t node : open) end_[node] = static_cast<uint32_t>(byte_.size());
  first_token_.push_back(static_cast<uint32_t>(tokens_.size()));
}

void VocabIndex::build_string_tables() {
  const size_t n = static_cast<size_t>(n_vocab_);
  stay_.assign(kStrSubCount * n, kNotStay);
  exits_.resize(kStrSubCount);
  escapes_.resize(kStrSubCount);
  std::vector<uint8_t> is_end(n);
  for (int32_t id : end_ids_) {
    if (id >= 0 && id < n_vocab_) is_end[id] = 1;
  }
  for (int s0 = 0; s0 < kStrSubCount; ++s0) {
    for (int32_t id = 0; id < n_vocab_; ++id) {
      const std::string_view p = piece(id);
      if (p.empty() || is_end[id]) continue;
      StrSub s = static_cast<StrSub>(s0);
      uint32_t chars = 0;
      bool escape = false;
      bool rejected = false;
      bool closed = false;
      for (char ch : p) {
        const bool normal = s == StrSub::kNormal;
        const StrStep r = str_step(s, static_cast<uint8_t>(ch));
        if (r == StrStep::kReject) {
          rejected = true;
          break;
        }
        if (r == StrStep::kClose) {
          closed = true;
          break;
        }
        if (r == StrStep::kStart) ++chars;
        escape |= normal && ch == '\\';
      }
      if (rejected) continue;
      if (closed) {
        exits_[s0].push_back(id);
      } else {
        stay_[s0 * n + id] = static_cast<uint16_t>(std::min<uint32_t>(chars, kCharsMask) |
                                                   (escape ? kHasEscape : 0));
        if (escape) escapes_[s0].push_back(id);
      }
    }
  }
}

TokenMatcher::TokenMatcher(std::shared_ptr<const Grammar> grammar, const VocabIndex& vocab)
    : grammar_(std::move(grammar)),
      vocab_(vocab),
      buffers_(std::make_unique<State[]>(3)),
      walk_(std::make_unique<State[]>(vocab.max_piece_bytes() + 1)) {
  initial_state(*grammar_, grammar_->root, &cur());
}

bool TokenMatcher::accept_bytes(std::string_view bytes) {
  const State* after = nullptr;
  if (!step_bytes(*grammar_, cur(), bytes, &scratch(0), &scratch(1), &after)) return false;
  if (after == &scratch(0)) {
    cur_ = (cur_ + 1) % 3;
  } else if (after == &scratch(1)) {
    cur_ = (cur_ + 2) % 3;
  }  // else: no bytes, nothing changed
  return true;
}

bool TokenMatcher::accepts_end() {
  return grammar::accepts_end(*grammar_, cur(), &scratch(0));
}

bool TokenMatcher::finished() {
  return accepts_end() && !can_continue(*grammar_, cur(), &scratch(0));
}

bool TokenMatcher::token_allowed(int32_t id) {
  const State* after = nullptr;
  return step_bytes(*grammar_, cur(), vocab_.piece(id), &scratch(0), &scratch(1), &after);
}

void TokenMatcher::fill_mask(std::span<uint64_t> allowed) {
  std::fill(allowed.begin(), allowed.end(), 0);
  std::array<StringTop, kMaxThreads> tops;
  if (string_tops(*grammar_, cur(), &tops)) {
    fill_from_string_tables(tops, allowed);
  } else {
    fill_from_trie(allowed);
  }
  if (accepts_end()) {
    for (int32_t id : vocab_.end_ids_) allowed[id >> 6] |= uint64_t{1} << (id & 63);
  }
}

void TokenMatcher::fill_from_string_tables(const std::array<StringTop, kMaxThreads>& tops,
                                           std::span<uint64_t> allowed) {
  const int32_t n = vocab_.n_vocab_;
  for (int t = 0; t < cur().n_threads; ++t) {
    const StringTop& top = tops[t];
    const uint16_t* stay = vocab_.stay_.data() + static_cast<size_t>(top.sub) * n;
    // A token stays inside when it is in the table, starts at most `room` characters and,
    // in a free key, starts no escape.
    const uint16_t reject_bits = top.key ? VocabIndex::kHasEscape : 0;
    const uint32_t room = std::min<uint32_t>(top.room, VocabIndex::kCharsMask);
    for (int32_t w = 0; w * 64 < n; ++w) {
      uint64_t word = 0;
      const int32_t last = std::min(64, n - w * 64);
      for (int32_t b = 0; b < last; ++b) {
        const uint16_t code = stay[w * 64 + b];
        const bool ok = code != VocabIndex::kNotStay && (code & reject_bits) == 0 &&
                        (code & VocabIndex::kCharsMask) <= room;
        word |= uint64_t{ok} << b;
      }
      allowed[w] |= word;
    }
    // The rest that may be allowed goes through the automaton.
    for (const auto* list : {&vocab_.exits_[static_cast<size_t>(top.sub)],
                             top.key ? &vocab_.escapes_[static_cast<size_t>(top.sub)] : nullptr}) {
      if (list == nullptr) continue;
      for (int32_t id : *list) {
        uint64_t& word = allowed[id >> 6];
        const uint64_t bit = uint64_t{1} << (id & 63);
        if (!(word & bit) && token_allowed(id)) word |= bit;
      }
    }
  }
}

void TokenMatcher::fill_from_trie(std::span<uint64_t> allowed) {
  const size_t n_nodes = vocab_.byte_.size();
  size_t i = 0;
  while (i < n_nodes) {
    const int d = vocab_.depth_[i];
    const State& parent = d == 1 ? cur() : walk_[d - 1];
    if (!step(*grammar_, parent, vocab_.byte_[i], &walk_[d])) {
      i = vocab_.end_[i];  // no token under this node can come next
      continue;
    }
    for (uint32_t k = vocab_.first_token_[i]; k < vocab_.first_token_[i + 1]; ++k) {
      const int32_t id = vocab_.tokens_[k];
      allowed[id >> 6] |= uint64_t{1} << (id & 63);
    }
    ++i;
  }
}

}  // namespace hypura::grammar
