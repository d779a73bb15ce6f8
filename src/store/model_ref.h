// What `hypura pull` accepts, and which files of a Hugging Face repository a name means.
//
//   hf.co/ORG/REPO[:QUANT]      (also huggingface.co/...): the form Ollama accepts; QUANT
//                               picks the GGUF file of that quantization (Q4_K_M, IQ3_XS,
//                               F16, ...; any case), default Q4_K_M
//   https://HOST/PATH.gguf      a plain URL of one GGUF file (http:// too: a mirror on the
//                               local network)
//
// A repository's files come from the Hub's tree API; pick_quant() chooses the GGUF file of
// the requested quantization, or every part of a split one (NAME-00001-of-00003.gguf),
// and its errors list the quantizations the repository has.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hypura::store {

struct ModelRef {
  enum class Kind { kHuggingFace, kUrl };
  Kind kind = Kind::kHuggingFace;
  std::string org, repo;  // kHuggingFace
  std::string quant;      // kHuggingFace: as given, upper case; "" for the default
  std::string url;        // kUrl

  // The name a pulled model is listed and run under: hf.co/ORG/REPO:QUANT (the chosen
  // quantization) or the URL.
  std::string name(const std::string& chosen_quant) const;
};

// Parses a pull name. Errors say which forms are accepted.
Result<ModelRef> parse_model_ref(std::string_view text);

// One file of a repository's tree: its path, size and LFS SHA-256 (lower-case hex; empty
// for files not in LFS).
struct RepoFile {
  std::string path;
  uint64_t size = 0;
  std::string sha256;
};

// The Hub's tree listing (GET /api/models/ORG/REPO/tree/main?recursive=true) to its files.
Result<std::vector<RepoFile>> parse_repo_tree(std::string_view json);

// The quantization a GGUF file name declares (upper case, e.g. "Q4_K_M", "IQ2_XXS",
// "BF16"), or "" when it names none.
std::string quant_of(std::string_view file_name);

// The files of the requested quantization (quant "": Q4_K_M): one file, or the parts of a
// split file in order. Vision projectors (mmproj) are never chosen. *chosen: the
// quantization picked. Errors list what the repository has.
Result<std::vector<RepoFile>> pick_quant(const std::vector<RepoFile>& files,
                                         const std::string& quant, std::string* chosen);

// "hf.co" names are case-insensitive on the Hub; a valid ORG or REPO segment.
bool valid_repo_segment(std::string_view s);

}  // namespace hypura::store
