// `hypura pull NAME`: download a model into the models folder (src/store/model_store.h):
// hf.co/ORG/REPO[:QUANT] (the form Ollama accepts) or the URL of a .gguf file. Resumable
// (run it again after an interruption), verified against the Hub's SHA-256, disk space
// checked first, a progress bar with rate and time left on stderr. HF_TOKEN, when set, is
// sent to the Hub for gated repositories (never logged).
#include <cstdlib>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/progress_bar.h"
#include "common/size.h"
#include "store/model_store.h"

namespace hypura::cli {
namespace {

struct PullArgs {
  std::string name;
  std::string models_dir;
  std::string endpoint = "https://huggingface.co";
};

int run_pull(const PullArgs& args) {
  Result<store::ModelStore> s = store::ModelStore::open(args.models_dir);
  if (!s.is_ok()) {
    std::cerr << "hypura pull: " << s.status().message() << "\n";
    return 1;
  }
  store::PullOptions o;
  o.endpoint = args.endpoint;
  if (const char* token = std::getenv("HF_TOKEN")) o.http.token = token;
  std::unique_ptr<ProgressBar> bar;
  int file = 0;
  const auto progress = [&](const store::PullEvent& e) {
    if (e.file.empty()) {
      std::cerr << e.status << "\n";
      return;
    }
    if (e.index != file) {  // a new file: its line, then its own bar
      file = e.index;
      std::cerr << e.status << " (" << e.index << "/" << e.count << ")\n";
      bar = std::make_unique<ProgressBar>();
    }
    if (e.total > 0 || e.completed > 0) bar->update(e.completed, e.total);
  };
  Result<store::StoredModel> m = s->pull(args.name, o, progress);
  if (!m.is_ok()) {
    std::cerr << "hypura pull: " << m.status().message() << "\n";
    return m.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << m->name << "  " << format_size(m->bytes()) << "  "
            << s->dir() + "/" + m->files.front().path << "\n";
  return 0;
}

std::function<int()> setup_pull(CLI::App& app) {
  auto args = std::make_shared<PullArgs>();
  app.add_option("name", args->name,
                 "hf.co/ORG/REPO[:QUANT] (default quantization Q4_K_M) or https://.../FILE.gguf")
      ->required();
  add_models_dir_option(app, &args->models_dir);
  app.add_option("--hf-endpoint", args->endpoint,
                 "the Hugging Face Hub to resolve hf.co names at (a mirror)");
  return [args] { return run_pull(*args); };
}

const Registrar kRegistrar({"pull", "download a model: hf.co/ORG/REPO[:QUANT] or a .gguf URL", 15,
                            setup_pull});

}  // namespace
}  // namespace hypura::cli
