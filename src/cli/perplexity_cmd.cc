// `hypura perplexity MODEL -f TEXT`: perplexity over non-overlapping chunks, as
// llama-perplexity computes it (runtime/perplexity.h), and model-to-model comparison:
//
//   hypura perplexity exact.gguf -f text.txt --save-logits exact.logp
//   hypura perplexity quant.gguf --kl-divergence exact.logp     # tokens come from the file
//
// prints the quantized model's KL divergence from the exact one (mean ± standard error,
// median, p99, max) and how often both pick the same top token. Progress goes to stderr,
// the report to stdout (--json: one JSON object).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "compute/compute.h"
#include "eval/perplexity.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace hypura::cli {
namespace {

struct PerplexityArgs {
  std::string model;
  std::string text_file;
  int64_t context = 512;
  int64_t chunks = 0;
  EngineFlags engine;
  std::string save_logits;
  std::string kl_divergence;
  bool json = false;
  bool per_token = false;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A bar redrawn in place on a terminal; elsewhere (logs, CI) one line per tenth.
void draw_progress(int64_t done, int64_t total, int64_t tokens_per_chunk, double elapsed) {
  static const bool tty = isatty(STDERR_FILENO);
  const int pct = static_cast<int>(done * 100 / total);
  const double tok_s = elapsed > 0 ? static_cast<double>(done * tokens_per_chunk) / elapsed : 0;
  const double eta = done > 0 ? elapsed * static_cast<double>(total - done) / done : 0;
  if (tty) {
    const int width = 30, filled = pct * width / 100;
    std::fprintf(stderr, "\rperplexity [%.*s%*s] %3d%% chunk %lld/%lld, %.0f tok/s, ETA %.0f s",
                 filled, "##############################", width - filled, "", pct,
                 static_cast<long long>(done), static_cast<long long>(total), tok_s, eta);
    if (done == total) std::fprintf(stderr, "\n");
  } else if (done == total || (done * 10 / total) != ((done - 1) * 10 / total)) {
    std::fprintf(stderr, "perplexity: chunk %lld/%lld (%d%%), %.0f tok/s, ETA %.0f s\n",
                 static_cast<long long>(done), static_cast<long long>(total), pct, tok_s, eta);
  }
  std::fflush(stderr);
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The chunks to evaluate: the compared file's, or the text's tokens chunked here.
Result<std::vector<int32_t>> chunks_to_evaluate(const runtime::Engine& engine,
                                                const PerplexityArgs& a,
                                                const eval::LogProbReader* compare) {
  if (compare != nullptr) {
    std::vector<int32_t> chunks = compare->tokens();
    const int64_t n = a.chunks > 0 ? std::min(a.chunks, compare->n_chunks()) : compare->n_chunks();
    chunks.resize(static_cast<size_t>(n * compare->n_ctx()));
    return chunks;
  }
  auto text = read_text(a.text_file);
  if (!text.is_ok()) return text.status();
  const auto& tok = engine.tokenizer();
  const std::vector<int32_t> tokens = engine.tokenize(*text, /*add_special=*/true);
  const int32_t bos = tok.add_bos() ? tok.bos_id() : -1;
  return eval::make_chunks(tokens, a.context, a.chunks, bos);
}

nlohmann::json report_json(const PerplexityArgs& a, const std::string& path, const char* simd,
                           const eval::PerplexityResult& r, double seconds) {
  const auto& n = r.nll;
  nlohmann::json j = {{"model", path},
                      {"simd", simd},
                      {"n_ctx", r.n_ctx},
                      {"chunks", r.n_chunks},
                      {"tokens_scored", n.count},
                      {"perplexity", n.perplexity()},
                      {"perplexity_stderr", n.perplexity_stderr()},
                      {"mean_nll", n.mean()},
                      {"seconds", seconds},
                      {"tokens_per_second", seconds > 0 ? r.n_chunks * r.n_ctx / seconds : 0.0}};
  if (!a.kl_divergence.empty()) {
    const auto& k = r.kl;
    j["kl_divergence"] = {{"reference", a.kl_divergence},
                          {"mean", k.mean()},
                          {"mean_stderr", k.mean_stderr()},
                          {"median", k.quantile(0.5)},
                          {"p99", k.quantile(0.99)},
                          {"max", k.max()},
                          {"top1_agreement", k.top1_agreement()},
                          {"top1_agreement_stderr", k.top1_agreement_stderr()},
                          {"reference_perplexity", k.reference_nll.perplexity()},
                          {"ln_ppl_ratio", n.mean() - k.reference_nll.mean()}};
    if (a.per_token) {
      j["kl_divergence"]["per_token"] = {{"kl", k.kl}, {"top1_agree", k.top1_matches}};
    }
  }
  return j;
}

void print_report(const nlohmann::json& j) {
  std::printf("model:       %s (%s)\n", j["model"].get<std::string>().c_str(),
              j["simd"].get<std::string>().c_str());
  std::printf("chunks:      %lld x %lld tokens, %lld scored, %.1f s (%.0f tok/s)\n",
              j["chunks"].get<long long>(), j["n_ctx"].get<long long>(),
              j["tokens_scored"].get<long long>(), j["seconds"].get<double>(),
              j["tokens_per_second"].get<double>());
  std::printf("perplexity:  %.4f +/- %.4f\n", j["perplexity"].get<double>(),
              j["perplexity_stderr"].get<double>());
  if (!j.contains("kl_divergence")) return;
  const auto& k = j["kl_divergence"];
  std::printf("reference:   perplexity %.4f, ln(PPL/PPL_ref) %.5f\n",
              k["reference_perplexity"].get<double>(), k["ln_ppl_ratio"].get<double>());
  std::printf("KL:          mean %.6f +/- %.6f, median %.6f, p99 %.6f, max %.6f\n",
              k["mean"].get<double>(), k["mean_stderr"].get<double>(), k["median"].get<double>(),
              k["p99"].get<double>(), k["max"].get<double>());
  std::printf("same top-1:  %.3f%% +/- %.3f%%\n", 100 * k["top1_agreement"].get<double>(),
              100 * k["top1_agreement_stderr"].get<double>());
}

int fail(const std::string& message, int code = 1) {
  std::cerr << "hypura perplexity: " << message << "\n";
  return code;
}

int run_perplexity(const PerplexityArgs& a) {
  const std::string path = resolve_model_path(a.model);
  if (path.empty()) return fail("no model given and no default model in test-models/", 2);
  if (a.text_file.empty() == a.kl_divergence.empty()) {
    return fail(
        "give -f TEXT (perplexity of a text) or --kl-divergence FILE (compare against "
        "saved logits; the tokens come from the file), not both",
        2);
  }
  std::unique_ptr<eval::LogProbReader> compare;
  if (!a.kl_divergence.empty()) {
    auto r = eval::LogProbReader::open(a.kl_divergence);
    if (!r.is_ok()) return fail(r.status().message());
    compare = std::move(r).value();
  }
  const runtime::EngineOptions eo =
      engine_options(a.engine, path, compare ? compare->n_ctx() : a.context);
  auto engine = runtime::Engine::load(eo);
  if (!engine.is_ok()) return fail(path + ": " + engine.status().message());
  if ((*engine)->n_ctx() < eo.n_ctx) {
    return fail("the model's context is " + std::to_string((*engine)->n_ctx()) +
                    " tokens, fewer than the " + std::to_string(eo.n_ctx) + " asked for",
                2);
  }
  auto chunks = chunks_to_evaluate(**engine, a, compare.get());
  if (!chunks.is_ok()) return fail(chunks.status().message(), 2);

  eval::PerplexityOptions po;
  po.n_ctx = eo.n_ctx;
  po.compare = compare.get();
  std::unique_ptr<eval::LogProbWriter> save;
  if (!a.save_logits.empty()) {
    auto w = eval::LogProbWriter::create(a.save_logits, (*engine)->n_vocab(), po.n_ctx,
                                         static_cast<int64_t>(chunks->size()) / po.n_ctx, *chunks);
    if (!w.is_ok()) return fail(w.status().message());
    save = std::move(w).value();
    po.save = save.get();
  }
  const auto t0 = Clock::now();
  po.progress = [&](int64_t done, int64_t total) {
    draw_progress(done, total, po.n_ctx, seconds_since(t0));
  };
  auto session = (*engine)->new_session();
  auto eval = [&](const std::vector<int32_t>& tokens, std::vector<float>* logits) {
    session->reset();
    return session->eval(tokens, logits);
  };
  auto result = eval::evaluate_perplexity(eval, (*engine)->n_vocab(), *chunks, po);
  if (!result.is_ok()) return fail(result.status().message());
  if (save) {
    if (Status st = save->close(); !st.is_ok()) return fail(st.message());
  }
  const compute::Context* ctx = (*engine)->compute_context();
  const char* simd = ctx != nullptr ? ctx->simd_name() : compute::default_simd_name();
  const nlohmann::json report = report_json(a, path, simd, *result, seconds_since(t0));
  if (a.json) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    print_report(report);
  }
  return 0;
}

std::function<int()> setup_perplexity(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  app.add_option("model", a->model, "GGUF file; default: the default test model");
  app.add_option("-f,--file", a->text_file, "text to score");
  app.add_option("-c,--context", a->context, "tokens per chunk; the second half of each is scored")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 20));
  app.add_option("--chunks", a->chunks, "score at most this many chunks (default: all)")
      ->check(CLI::NonNegativeNumber);
  add_engine_flags(app, &a->engine);
  app.add_option("--save-logits", a->save_logits,
                 "write the scored rows' log-probabilities to FILE (for --kl-divergence)");
  app.add_option("--kl-divergence", a->kl_divergence,
                 "compare against FILE of --save-logits: KL divergence and top-1 agreement")
      ->check(CLI::ExistingFile);
  app.add_flag("--json", a->json, "print the report as JSON");
  app.add_flag("--per-token", a->per_token,
               "with --kl-divergence --json: every scored token's KL and top-1 match (for "
               "paired comparisons of two runs, as scripts/fidelity.sh makes)");
  return [a] { return run_perplexity(*a); };
}

const Registrar kRegistrar({"perplexity",
                            "perplexity of a text; KL divergence against saved logits", 45,
                            setup_perplexity});

}  // namespace
}  // namespace hypura::cli
