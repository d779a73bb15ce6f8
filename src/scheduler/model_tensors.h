// ModelTensors: what the planner needs to know about a model, without its bytes.
//
// For every tensor: role and layer (model/tensor_role.h), size in bytes, and how much of
// it one generated token reads (dense weights: all of it; a stacked MoE expert tensor:
// n_expert_used / n_expert of it; the token embedding: one row). Plus the few dimensions
// that size the KV cache and the work buffers. Built from a GGUF file's directory, or
// synthetically from a shape (scheduler/testing/shapes.h) so plans for models that are not on
// disk (a 1T-parameter MoE) can be made and tested.
//
// Thread-safety: plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/tensor_role.h"

namespace hypura::scheduler {

struct TensorDesc {
  std::string name;  // GGUF name, "blk.3.ffn_up.weight"
  model::TensorRole role = model::TensorRole::kOther;
  int layer = -1;                             // blk index, -1 outside the layer stack
  uint64_t bytes = 0;                         // size of the tensor's data
  gguf::GgmlType type = gguf::GgmlType::F32;  // block format (its CPU decode rate)
  int64_t n_expert = 0;           // experts stacked in this tensor (MoE expert roles), else 0
  uint64_t row_bytes = 0;         // bytes of one row (the embedding reads one per token)
  int64_t n_cols = 0;             // elements of one row (the CPU's decode rate depends on it);
                                  // 0: unknown (synthetic shapes), the probe's default width
  double access_per_token = 1.0;  // fraction of `bytes` one generated token reads
  int32_t file_index = -1;        // index in GgufFile::tensors() (model::TensorId); -1: synthetic
  uint32_t split = 0;             // which split file holds the data (file_index >= 0)
  uint64_t offset = 0;            // absolute offset of the data in that file (file_index >= 0)
};

struct ModelTensors {
  std::string name;          // general.name or the shape's name
  std::string architecture;  // general.architecture
  int n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_head = 0;
  int64_t n_vocab = 0;
  int64_t n_ff = 0;      // widest FFN a token passes through (dense, or experts used)
  int64_t n_expert = 0;  // 0: dense
  int64_t n_expert_used = 0;
  uint64_t kv_elements_per_token = 0;  // K and V values stored per position, all layers
  int64_t n_ctx_train = 4096;          // <arch>.context_length (the runtime's cap on the context)
  // What the process holds beside the weights grows with these (process_overhead_bytes in
  // plan.h): the tokenizer's tokens and merges, and the metadata array elements the GGUF
  // directory keeps parsed. Shapes without a file estimate them from n_vocab.
  uint64_t n_tokens = 0;
  uint64_t n_merges = 0;
  uint64_t metadata_array_elements = 0;
  std::vector<TensorDesc> tensors;
  // How often each expert was routed in earlier runs, (n_layer * n_expert) layer-major
  // (the runtime's persisted routing statistics, runtime/coactivation.h); empty when none
  // were recorded, and the planner then assumes uniform routing.
  std::vector<double> expert_frequency;

  uint64_t total_bytes() const;
  // Bytes one generated token reads if everything is resident (sum of access x bytes).
  uint64_t bytes_read_per_token() const;
};

// Reads dimensions from "<arch>.*" metadata and classifies every tensor. Architectures
// the runtime cannot run still get a plan (roles come from names). Fails only when the
// layer count or embedding width is missing.
Result<ModelTensors> model_tensors_from_gguf(const gguf::GgufFile& file);

// Fills access_per_token (and row_bytes for the embedding) from role and the model's
// expert counts. Used by both builders.
void set_access_frequencies(ModelTensors& model);

// Optional measured routing: per-expert selection frequency sharpens the uniform
// n_used/n_expert assumption later (hit rates in the cost model use the uniform one).

}  // namespace hypura::scheduler
