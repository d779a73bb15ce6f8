// `hypura synth -o FILE [--preset P] [--arch A] [--quant Q] [dims...]`: writes a synthetic
// GGUF model of any supported architecture and size (see src/model/synth/synth.h and
// docs/MODELS.md). Disk-bound and constant-memory: a 40 GB file on a 24 GiB machine.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>

#include "cli/command.h"
#include "cli/progress_bar.h"
#include "common/size.h"
#include "synth/synth.h"
#include "tokenizer/builtin_templates.h"

namespace hypura::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct SynthArgs {
  std::string output;
  std::string preset = "tiny";
  std::string arch;  // default: the preset's
  std::string quant = "q4_k_m";
  std::string vocab_from;
  std::string name;
  uint64_t seed = 42;
  bool dry_run = false;
  bool quiet = false;
  bool no_sync = false;
  bool tied = false;
  double logit_scale = 1.0;
  bool header_only = false;
  std::map<std::string, int64_t> dims;  // flag name -> value, only those given
};

// Explicit dimension flags, each overriding one field of the preset's shape.
const std::vector<std::pair<const char*, int64_t synth::Shape::*>>& dim_flags() {
  static const std::vector<std::pair<const char*, int64_t synth::Shape::*>> kFlags = {
      {"n-vocab", &synth::Shape::n_vocab},
      {"n-embd", &synth::Shape::n_embd},
      {"n-layer", &synth::Shape::n_layer},
      {"n-head", &synth::Shape::n_head},
      {"n-head-kv", &synth::Shape::n_head_kv},
      {"head-dim", &synth::Shape::head_dim},
      {"n-ff", &synth::Shape::n_ff},
      {"n-expert", &synth::Shape::n_expert},
      {"n-expert-used", &synth::Shape::n_expert_used},
      {"n-ff-exp", &synth::Shape::n_ff_exp},
      {"n-ctx", &synth::Shape::n_ctx},
      {"n-rot", &synth::Shape::n_rot},
      {"n-expert-shared", &synth::Shape::n_expert_shared},
      {"n-dense-lead", &synth::Shape::n_dense_lead},
      {"n-nextn", &synth::Shape::n_nextn},
  };
  return kFlags;
}

std::string default_models_dir() {
  for (const char* dir : {"test-models", "../test-models"}) {
    if (std::filesystem::is_directory(dir)) return dir;
  }
  return "test-models";
}

Result<synth::SynthSpec> build_spec(const SynthArgs& args) {
  HYPURA_ASSIGN_OR_RETURN(synth::Preset preset, synth::find_preset(args.preset));
  synth::Arch arch = preset.default_arch;
  if (!args.arch.empty()) {
    HYPURA_ASSIGN_OR_RETURN(arch, synth::parse_arch(args.arch));
  }
  synth::SynthSpec spec;
  spec.arch = arch;
  HYPURA_ASSIGN_OR_RETURN(spec.shape, synth::preset_shape(preset, arch));
  for (const auto& [flag, field] : dim_flags()) {
    auto it = args.dims.find(flag);
    if (it != args.dims.end()) spec.shape.*field = it->second;
  }
  HYPURA_ASSIGN_OR_RETURN(spec.mix, synth::parse_mix(args.quant));
  spec.seed = args.seed;
  spec.tied_embeddings = args.tied;
  spec.logit_scale = args.logit_scale;
  spec.header_only = args.header_only;
  spec.vocab_from = args.vocab_from.empty()
                        ? synth::default_vocab_source(arch, default_models_dir())
                        : args.vocab_from;
  spec.name = args.name.empty() ? "synthetic " + std::string(synth::arch_cli_name(arch)) + " " +
                                      preset.name + " " + synth::mix_name(spec.mix)
                                : args.name;
  return synth::validate(spec);
}

Status check_free_space(const std::string& path, uint64_t need) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    return Status::ok();  // a device such as /dev/null (generator speed runs)
  }
  std::filesystem::path dir = std::filesystem::absolute(path).parent_path();
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) != 0) return Status::ok();  // let the write report it
  uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (need > free_bytes) {
    return resource_exhausted(path + " needs " + format_size(need) + ", only " +
                              format_size(free_bytes) + " free");
  }
  return Status::ok();
}

// Flushes the file to the device, so the timing is the disk's and not the page cache's.
Status sync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path + ": cannot open for fsync");
  int rc = ::fdatasync(fd);
  ::close(fd);
  return rc == 0 ? Status::ok() : io_error(path + ": fdatasync failed");
}

void print_plan(const synth::SynthSpec& spec, const synth::SynthSummary& sum) {
  const synth::Shape& s = spec.shape;
  std::fprintf(stderr,
               "synth: %s %s, n_layer %lld n_embd %lld n_head %lld/%lld head_dim %lld n_ff %lld "
               "n_vocab %lld",
               synth::arch_cli_name(spec.arch), synth::mix_name(spec.mix),
               static_cast<long long>(s.n_layer), static_cast<long long>(s.n_embd),
               static_cast<long long>(s.n_head), static_cast<long long>(s.n_head_kv),
               static_cast<long long>(s.head_dim), static_cast<long long>(s.n_ff),
               static_cast<long long>(s.n_vocab));
  if (s.n_expert > 0) {
    std::fprintf(stderr, " experts %lld (%lld used) n_ff_exp %lld",
                 static_cast<long long>(s.n_expert), static_cast<long long>(s.n_expert_used),
                 static_cast<long long>(s.n_ff_exp));
  }
  if (s.n_expert_shared + s.n_dense_lead + s.n_nextn > 0 || (s.n_rot > 0 && s.n_rot < s.head_dim)) {
    std::fprintf(stderr, " shared %lld dense-lead %lld nextn %lld n_rot %lld",
                 static_cast<long long>(s.n_expert_shared), static_cast<long long>(s.n_dense_lead),
                 static_cast<long long>(s.n_nextn), static_cast<long long>(s.n_rot));
  }
  std::fprintf(stderr,
               "\nsynth: %zu tensors, %.3f B parameters, %s of tensor data; vocab from %s\n",
               sum.n_tensors, static_cast<double>(sum.n_params) / 1e9,
               format_size(sum.data_bytes).c_str(), spec.vocab_from.c_str());
}

// A harmony vocabulary (gpt-oss's) that carries no chat template: the file gets
// gpt-oss's own, as a real gpt-oss file has it.
bool harmony_without_template(const synth::Vocab& vocab) {
  bool harmony = false;
  for (const auto& [key, value] : vocab.entries) {
    if (key == "tokenizer.chat_template") return false;
    if (key != "tokenizer.ggml.tokens" || value.as_array() == nullptr) continue;
    for (const gguf::Value& token : *value.as_array()) {
      const auto text = token.as_string();
      harmony = harmony || (text && *text == "<|channel|>");
    }
  }
  return harmony;
}

int run_synth(const SynthArgs& args) {
  Result<synth::SynthSpec> spec = build_spec(args);
  if (!spec.is_ok()) {
    std::cerr << "hypura synth: " << spec.status().message() << "\n";
    return 2;
  }
  Result<synth::Vocab> vocab = synth::load_vocab(spec->vocab_from, spec->shape.n_vocab);
  if (!vocab.is_ok()) {
    std::cerr << "hypura synth: " << vocab.status().message() << "\n";
    return 1;
  }
  spec->shape.n_vocab = vocab->n_vocab;
  if (spec->arch == synth::Arch::kGptOss && harmony_without_template(*vocab))
    spec->chat_template = tokenizer::gpt_oss_chat_template();
  synth::SynthSummary sum = synth::summarize(synth::plan_tensors(*spec));
  if (!args.quiet || args.dry_run) print_plan(*spec, sum);
  if (args.dry_run) return 0;

  ProgressBar bar;
  Clock::time_point start = Clock::now();
  Status st = args.header_only ? Status::ok() : check_free_space(args.output, sum.data_bytes);
  if (st.is_ok()) {
    auto progress = [&bar, &args](uint64_t done, uint64_t total) {
      if (!args.quiet) bar.update(done, total);
    };
    st = synth::write_model(*spec, *vocab, args.output, progress);
  }
  double write_s = std::chrono::duration<double>(Clock::now() - start).count();
  const bool sync = !args.no_sync && std::filesystem::is_regular_file(args.output);
  if (st.is_ok() && sync) st = sync_file(args.output);
  if (!st.is_ok()) {
    std::cerr << "hypura synth: " << st.message() << "\n";
    return 1;
  }
  double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::error_code ec;  // /dev/null and pipes have no size: report the data bytes then
  uint64_t size = std::filesystem::is_regular_file(args.output, ec)
                      ? std::filesystem::file_size(args.output, ec)
                      : sum.data_bytes;
  std::printf("wrote %s: %s in %.2f s (%.0f MB/s%s; write %.2f s)\n", args.output.c_str(),
              format_size(size).c_str(), total_s, static_cast<double>(size) / 1e6 / total_s,
              sync ? " including fdatasync" : ", not synced", write_s);
  return 0;
}

std::function<int()> setup_synth(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  app.add_option("-o,--output", args->output, "GGUF file to write")->required();
  app.add_option("--preset", args->preset,
                 "shape: tiny, 1b, 8b, moe, 70b, mixtral-8x7b, qwen3-30b-a3b, deepseek-v3, "
                 "deepseek-v2-lite, deepseek2-tiny, deepseek2-lite-tiny, gpt-oss-20b, "
                 "gpt-oss-120b, gpt-oss-tiny, glm-4.5-air, glm4moe-tiny")
      ->capture_default_str();
  app.add_option(
      "--arch", args->arch,
      "llama, qwen2, qwen3, gemma3, mixtral, qwen3moe, deepseek2, gpt-oss, glm4moe (default: "
      "the preset's)");
  app.add_option("--quant", args->quant, "quant mix: f32, f16, q8_0, q4_k_m, q5_k_m, mxfp4_moe")
      ->capture_default_str();
  app.add_option("--vocab-from", args->vocab_from,
                 "GGUF whose tokenizer is copied (default: a test model, see docs/MODELS.md)");
  app.add_option("--seed", args->seed, "weights seed")->capture_default_str();
  app.add_option("--name", args->name, "general.name");
  for (const auto& [flag, field] : dim_flags()) {
    std::string name = std::string("--") + flag;
    app.add_option_function<int64_t>(
        name, [args, f = std::string(flag)](int64_t v) { args->dims[f] = v; },
        "override the preset's " + std::string(flag));
  }
  app.add_flag("--tied-embeddings", args->tied, "no output.weight (always so for gemma3)");
  app.add_option("--logit-scale", args->logit_scale,
                 "multiply the output head's weight std (3: logits of std ~3, as the goldens)")
      ->capture_default_str();
  app.add_flag("--dry-run", args->dry_run, "print the shape and size, write nothing");
  app.add_flag("--header-only", args->header_only,
               "write the header and leave the tensor data a hole (a sparse file of full "
               "size whose weights read as zeros): for inspect --plan of shapes bigger than "
               "the disk, not for running");
  app.add_flag("-q,--quiet", args->quiet, "no progress bar");
  app.add_flag("--no-sync", args->no_sync, "skip the final fdatasync");
  return [args] { return run_synth(*args); };
}

const Registrar kRegistrar({"synth", "write a synthetic GGUF model (any architecture and size)", 90,
                            setup_synth});

}  // namespace
}  // namespace hypura::cli
