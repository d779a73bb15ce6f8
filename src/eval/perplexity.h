// Perplexity and KL divergence over a token stream, as llama-perplexity measures them.
//
// The tokens are cut into non-overlapping chunks of n_ctx tokens (a trailing partial chunk
// is dropped); each chunk is evaluated from an empty KV cache, its first token replaced
// by BOS when the model wants one, and only the second half is scored: logits row j
// (j in [n_ctx/2, n_ctx - 1)) predicts token j + 1, so every scored token has at least
// n_ctx/2 tokens of context. Perplexity is exp(mean NLL), its standard error by the delta
// method from the NLL's sample variance.
//
// For model-to-model comparison the scored rows' log-probabilities can be saved to a file
// (LogProbWriter) and read back while another model is evaluated on the same tokens
// (LogProbReader): per token, KL(saved || this) and whether both argmaxes agree.
//
// File format (little-endian), written by one run and read by another:
//   magic "HYPLOGP1", u32 n_vocab, u32 n_ctx, u32 n_chunks, u32 reserved (0),
//   i32 tokens[n_chunks * n_ctx] (as evaluated, BOS substitution included),
//   then per chunk, per scored row: f32 log_probs[n_vocab].
// A row of gemma-3 (262,144 entries) is 1 MiB: 1,000 scored tokens take 1 GiB.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "common/status.h"

namespace hypura::eval {

// Log-softmax of one logits row, in float64 (the reference for every score below).
void log_softmax(const float* logits, int64_t n_vocab, std::vector<double>* out);

// First scored row of a chunk and how many rows it scores.
inline int64_t first_scored(int64_t n_ctx) {
  return n_ctx / 2;
}
inline int64_t scored_per_chunk(int64_t n_ctx) {
  return n_ctx - 1 - first_scored(n_ctx);
}

// Running NLL sums: perplexity and its standard error.
struct NllStats {
  int64_t count = 0;
  double sum = 0, sum_sq = 0;

  void add(double nll) {
    ++count;
    sum += nll;
    sum_sq += nll * nll;
  }
  double mean() const { return count ? sum / count : 0.0; }
  // Standard error of the mean NLL (0 with fewer than two samples).
  double mean_stderr() const;
  double perplexity() const;
  double perplexity_stderr() const;  // delta method: ppl * stderr(mean NLL)
};

// Per-token KL divergences and top-1 agreement against saved log-probabilities.
struct KlStats {
  std::vector<double> kl;             // one per scored token, KL(reference || model) in nats
  std::vector<uint8_t> top1_matches;  // one per scored token: 1 when both argmaxes agree
  int64_t top1_agree = 0;
  NllStats reference_nll;  // the reference model's NLL on the same tokens

  void add(const std::vector<double>& ref_lp, const std::vector<double>& lp, int32_t next_token);
  double mean() const;
  double mean_stderr() const;
  double quantile(double q) const;  // of kl, nearest rank; 0 when empty
  double max() const;
  double top1_agreement() const;         // in [0, 1]
  double top1_agreement_stderr() const;  // binomial
};

class LogProbWriter {
 public:
  static Result<std::unique_ptr<LogProbWriter>> create(const std::string& path, int64_t n_vocab,
                                                       int64_t n_ctx, int64_t n_chunks,
                                                       const std::vector<int32_t>& tokens);
  Status write_row(const std::vector<double>& log_probs);
  // Puts the file in place; REQUIRES: every row written. Without it (an error, an
  // interruption) no file appears and an older one at the path stays as it was.
  Status close();

 private:
  explicit LogProbWriter(AtomicFile file) : file_(std::move(file)) {}
  AtomicFile file_;
  std::vector<float> row_;
};

class LogProbReader {
 public:
  // Validates the header and that the file holds exactly the rows the header promises.
  static Result<std::unique_ptr<LogProbReader>> open(const std::string& path);
  ~LogProbReader();
  int64_t n_vocab() const { return n_vocab_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_chunks() const { return n_chunks_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // (n_chunks * n_ctx)
  Status read_row(std::vector<double>* log_probs);

 private:
  LogProbReader() = default;
  std::FILE* f_ = nullptr;
  std::string path_;
  int64_t n_vocab_ = 0, n_ctx_ = 0, n_chunks_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<float> row_;
};

// Evaluates tokens from an empty cache and returns their logits (n, n_vocab).
using EvalFn =
    std::function<Status(const std::vector<int32_t>& tokens, std::vector<float>* logits)>;

struct PerplexityOptions {
  int64_t n_ctx = 512;
  LogProbWriter* save = nullptr;     // write the scored rows' log-probs here
  LogProbReader* compare = nullptr;  // compare against these (made on the same chunks)
  std::function<void(int64_t chunk, int64_t n_chunks)> progress;  // after each chunk
};

struct PerplexityResult {
  int64_t n_ctx = 0, n_chunks = 0;
  NllStats nll;
  KlStats kl;  // empty unless options.compare
};

// The token stream as evaluated: the first whole chunks of n_ctx tokens (at most
// max_chunks; 0: all), each chunk's first token replaced by bos_token (-1: kept).
// Errors: a context below 4, fewer tokens than one chunk.
Result<std::vector<int32_t>> make_chunks(const std::vector<int32_t>& tokens, int64_t n_ctx,
                                         int64_t max_chunks, int32_t bos_token);

// Scores each chunk of `chunks` (make_chunks' output, or a compared file's tokens()).
// Errors: chunks that are not whole multiples of n_ctx, a compared file made on other
// tokens or another vocabulary, and whatever eval or the files report.
Result<PerplexityResult> evaluate_perplexity(const EvalFn& eval, int64_t n_vocab,
                                             const std::vector<int32_t>& chunks,
                                             const PerplexityOptions& options);

}  // namespace hypura::eval
