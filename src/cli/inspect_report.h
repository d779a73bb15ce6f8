// What `hypura inspect` reports about a model file, computed from metadata alone.
//
// build_inspect_report() never reads tensor data: it sums the tensor directory by type,
// role and layer, and picks the hyperparameters out of the metadata. The text and JSON
// renderings are separate so the fuzzer (fuzz/gguf_fuzz.cc) can run exactly what the
// command runs. The JSON schema is documented in docs/GGUF.md.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace hypura::cli {

// Totals over a set of tensors.
struct TensorTotals {
  uint64_t n_tensors = 0;
  uint64_t n_params = 0;  // elements
  uint64_t n_bytes = 0;
  void add(const gguf::TensorInfo& t);
};

// Bytes of one blk.N layer, by the groups the planner places separately.
struct LayerBytes {
  int layer = 0;
  uint64_t attention = 0;      // q/k/v/qkv/o and their biases
  uint64_t ffn = 0;            // dense gate/up/down
  uint64_t experts = 0;        // stacked MoE experts (gate/up/down _exps)
  uint64_t shared_expert = 0;  // *_shexp
  uint64_t router = 0;         // ffn_gate_inp
  uint64_t norms = 0;          // every norm weight of the layer
  uint64_t other = 0;
  uint64_t total() const;
};

struct InspectReport {
  std::vector<std::string> files;  // one per split file
  uint64_t file_bytes = 0;         // all files together
  uint32_t gguf_version = 0;
  uint64_t alignment = 0;
  uint64_t data_offset = 0;  // of the first file
  std::string architecture;  // "" when the file has none
  std::string name;          // general.name
  TensorTotals all;
  // Hyperparameters from "<arch>.*" keys (absent when the file lacks them).
  std::optional<uint64_t> context_length, n_embd, n_layer, n_ff, n_ff_expert, n_head, n_head_kv,
      n_expert, n_expert_used, n_vocab;
  std::map<std::string, TensorTotals> by_type;  // ggml type name -> totals
  std::map<std::string, TensorTotals> by_role;  // role_name() -> totals
  TensorTotals outside_layers;                  // token_embd, output, output_norm, ...
  std::vector<LayerBytes> layers;               // indexed by layer number
};

InspectReport build_inspect_report(const gguf::GgufFile& file);

// A metadata value as JSON (strings as stored: dump with error_handler_t::replace). Arrays longer
// than max_array become "<array of N>" (the convention of ../shared/golden/manifest.json) unless
// max_array is nullopt.
nlohmann::ordered_json value_to_json(const gguf::Value& value, std::optional<size_t> max_array);

struct InspectOptions {
  bool tensors = false;        // list every tensor
  bool full_metadata = false;  // print long arrays in full
};

nlohmann::ordered_json report_to_json(const InspectReport& report, const gguf::GgufFile& file,
                                      const InspectOptions& options);
std::string report_to_text(const InspectReport& report, const gguf::GgufFile& file,
                           const InspectOptions& options);

}  // namespace hypura::cli
