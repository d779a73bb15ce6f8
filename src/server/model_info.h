// ModelInfo: what the server tells clients about its one model (/api/tags, /api/show,
// /api/ps, /v1/models), computed once at start from the GGUF file.
//
// Field meanings follow Ollama's: family is general.architecture, parameter_size a
// rounded count ("1.1B"), quantization_level the file type name ("Q4_K_M"), model_info
// the GGUF metadata (arrays longer than kMaxInfoArray elements, such as the vocabulary,
// are given as null, as Ollama does without "verbose"). The digest is not a content
// hash (hashing a 40 GB file at start would take minutes): it is a fingerprint of the
// path, size and modification time, stable while the file is unchanged.
//
// Thread-safety: a plain value; immutable once built.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace hypura::gguf {
class GgufFile;
}

namespace hypura::server {

struct ModelInfo {
  std::string name;                // "llama-q4_k_m:latest": file stem, or --alias
  std::string family;              // "llama"
  std::string parameter_size;      // "1.1B"
  std::string quantization_level;  // "Q4_K_M"
  uint64_t size_bytes = 0;         // model file(s) size
  std::string digest;              // 64 hex digits (fingerprint, see above)
  std::string modified_at;         // RFC 3339, the file's mtime
  int64_t created = 0;             // the file's mtime, unix seconds (/v1/models "created")
  nlohmann::json model_info = nlohmann::json::object();  // metadata key -> value
  std::string chat_template;                             // tokenizer.chat_template, "" when absent
  int64_t context_length = 0;  // the server's context window at start (--context), tokens
  std::string mode;            // the engine's inference mode ("full-resident", ...)
  // Ollama's capabilities: "completion", plus "tools" (the template renders tools) and
  // "insert" (fill-in-the-middle tokens) as the server finds them in the engine.
  std::vector<std::string> capabilities = {"completion"};
};

inline constexpr size_t kMaxInfoArray = 64;

// Builds the info of `file` opened from `path`, named `alias` (or the file stem).
ModelInfo model_info_from_gguf(const gguf::GgufFile& file, const std::string& path,
                               const std::string& alias, int64_t context_length);

// "1.1B", "7.2B", "350M": Ollama's rounding of a parameter count.
std::string format_parameter_size(uint64_t n_params);

// Name of a GGUF general.file_type value ("Q4_K_M"), or "unknown".
std::string file_type_name(uint64_t file_type);

}  // namespace hypura::server
