// SeqRows: one sequence's part of a forward pass over several sequences.
#pragma once

#include <cstdint>

namespace hypura::model {

class KvCache;

// n_tokens consecutive rows of a batch (from row0) at positions pos..pos+n_tokens-1 of the
// sequence's own KV cache. The logits of its last n_logits rows are outputs of the pass: 1
// for a prompt chunk or a decode step, every row for an eval, the drafted rows for a
// speculative verification.
struct SeqRows {
  KvCache* kv = nullptr;
  int64_t pos = 0;
  int64_t n_tokens = 0;
  int64_t n_logits = 1;  // 1..n_tokens
  int64_t row0 = 0;      // set by Blocks::begin
};

}  // namespace hypura::model
