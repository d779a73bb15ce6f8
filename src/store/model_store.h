// The models folder: what `hypura pull` downloaded, under the name it was pulled by.
//
// The folder is $HYPURA_MODELS, else $XDG_DATA_HOME/hypura/models, else
// ~/.local/share/hypura/models. A Hub model's files keep their repository paths under
// hf.co/ORG/REPO/, a URL's file goes under url/HOST/; manifest.json lists each model's name,
// source, files (sizes, SHA-256) and when it was pulled, rewritten atomically after each
// change. `run`, `bench`, `inspect` and `serve` find a pulled model by its name
// (resolve_model_path), `hypura list` and `/api/tags` list them, `hypura rm` and
// `/api/delete` remove them.
//
// Thread-safety: one ModelStore per thread; two processes pulling into one folder at once
// may lose one's manifest entry (the files stay and the next pull finds them complete).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/download.h"

namespace hypura::store {

struct StoredFile {
  std::string path;  // relative to the folder
  uint64_t size = 0;
  std::string sha256;
};

struct StoredModel {
  std::string name;    // hf.co/ORG/REPO:QUANT or the URL
  std::string source;  // the URL of its first file
  std::vector<StoredFile> files;
  int64_t pulled_at = 0;  // Unix seconds
  uint64_t bytes() const;
};

// What pull reports as it goes (Ollama's /api/pull statuses): "pulling manifest", then
// per file "pulling FILE" with bytes done of total, then "verifying sha256 digest" and
// "success".
struct PullEvent {
  std::string status;
  std::string file;          // the file being downloaded, "" otherwise
  std::string digest;        // its sha256:HEX when known
  int index = 0, count = 0;  // file index (1-based) of count
  uint64_t completed = 0, total = 0;
};
using PullProgress = std::function<void(const PullEvent&)>;

struct PullOptions {
  std::string endpoint = "https://huggingface.co";  // the Hub (a mirror, or a test server)
  HttpOptions http;
};

class ModelStore {
 public:
  // The folder from the environment, as above. Fails without HOME and XDG_DATA_HOME.
  static Result<std::string> default_dir();
  // The store of `dir`, or of default_dir() when dir is "".
  static Result<ModelStore> open(const std::string& dir);
  explicit ModelStore(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  Result<std::vector<StoredModel>> list() const;
  // The model `name` names: its exact name, any case, or hf.co/ORG/REPO without the
  // quantization when one of that repository was pulled. kNotFound when none.
  Result<StoredModel> find(std::string_view name) const;
  // The path to open for a pulled model (its first file; a split GGUF's first part).
  Result<std::string> path_of(std::string_view name) const;
  // Downloads `name` (model_ref.h's forms) into the folder: resumes a previous attempt,
  // checks disk space first, verifies every file. Pulling a model again re-checks its files
  // and downloads only what is missing.
  Result<StoredModel> pull(std::string_view name, const PullOptions& options,
                           const PullProgress& progress) const;
  // Deletes a pulled model's files and its manifest entry.
  Status remove(std::string_view name) const;

 private:
  Status save(const std::vector<StoredModel>& models) const;
  std::string dir_;
};

}  // namespace hypura::store
