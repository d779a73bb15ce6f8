// SeqRows: one sequence's part of a forward pass over several sequences.
#pragma once

#include <cstdint>

namespace hypura::model {

class KvCache;

// n_tokens consecutive rows of a batch (from row0) in cache slots pos..pos+n_tokens-1 of
// the sequence's own KV cache. The logits of its last n_logits rows are outputs of the
// pass: 1 for a prompt chunk or a decode step, every row for an eval, the drafted rows for
// a speculative verification.
//
// Without a tree, slot and position are the same: row t is position pos + t and attends
// to every position up to its own. With a tree (a speculative draft tree, runtime/
// speculative.h), the slots from tree_base on hold its nodes: node i (slot tree_base + i)
// continues node tree_parent[i] (< i), or the sequence before tree_base when that is -1.
// A node's position is tree_base + its depth (0 for the nodes that continue the sequence),
// and it attends to the positions before tree_base and to its own ancestors, in the slots
// they occupy: each node is computed exactly as its branch decoded alone.
struct SeqRows {
  KvCache* kv = nullptr;
  int64_t pos = 0;
  int64_t n_tokens = 0;
  int64_t n_logits = 1;                  // 1..n_tokens
  int64_t row0 = 0;                      // set by Blocks::begin
  const int32_t* tree_parent = nullptr;  // (pos + n_tokens - tree_base) parents, or null
  int64_t tree_base = 0;                 // REQUIRES: tree_base <= pos when tree_parent is set

  // Position of row t, and the depth of tree node `node` (0 without a tree).
  int64_t depth(int64_t node) const {
    int64_t d = 0;
    if (tree_parent != nullptr) {
      for (int32_t p = tree_parent[node]; p >= 0; p = tree_parent[p]) ++d;
    }
    return d;
  }
  int64_t position(int64_t t) const {
    return tree_parent != nullptr ? tree_base + depth(pos + t - tree_base) : pos + t;
  }
};

}  // namespace hypura::model
