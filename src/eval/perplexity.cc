#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hypura::eval {
namespace {

constexpr char kMagic[8] = {'H', 'Y', 'P', 'L', 'O', 'G', 'P', '1'};
constexpr int64_t kMaxVocab = int64_t{1} << 24;  // sanity caps for a file we read
constexpr int64_t kMaxCtx = int64_t{1} << 24;

struct Header {
  char magic[8];
  uint32_t n_vocab, n_ctx, n_chunks, reserved;
};
static_assert(sizeof(Header) == 24);

int64_t argmax(const std::vector<double>& v) {
  return std::max_element(v.begin(), v.end()) - v.begin();  // first of ties
}

Status file_error(const std::string& what, const std::string& path) {
  return io_error(what + " " + path + ": " + std::strerror(errno));
}

std::span<const uint8_t> as_bytes(const void* data, size_t n) {
  return {static_cast<const uint8_t*>(data), n};
}

}  // namespace

void log_softmax(const float* logits, int64_t n_vocab, std::vector<double>* out) {
  out->resize(static_cast<size_t>(n_vocab));
  double max = -INFINITY;
  for (int64_t i = 0; i < n_vocab; ++i) max = std::max(max, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = max + std::log(sum);
  for (int64_t i = 0; i < n_vocab; ++i) (*out)[i] = static_cast<double>(logits[i]) - log_z;
}

double NllStats::mean_stderr() const {
  if (count < 2) return 0.0;
  const double m = mean();
  const double var = std::max(0.0, sum_sq / count - m * m) * count / (count - 1);
  return std::sqrt(var / count);
}

double NllStats::perplexity() const {
  return std::exp(mean());
}

double NllStats::perplexity_stderr() const {
  return perplexity() * mean_stderr();
}

void KlStats::add(const std::vector<double>& ref_lp, const std::vector<double>& lp,
                  int32_t next_token) {
  double kl_sum = 0;
  for (size_t i = 0; i < ref_lp.size(); ++i) {
    const double p = std::exp(ref_lp[i]);
    if (p > 0) kl_sum += p * (ref_lp[i] - lp[i]);
  }
  kl.push_back(std::max(0.0, kl_sum));  // rounding can leave a tiny negative for equal rows
  const bool same = argmax(ref_lp) == argmax(lp);
  top1_matches.push_back(same ? 1 : 0);
  top1_agree += same;
  reference_nll.add(-ref_lp[static_cast<size_t>(next_token)]);
}

double KlStats::mean() const {
  double s = 0;
  for (double v : kl) s += v;
  return kl.empty() ? 0.0 : s / static_cast<double>(kl.size());
}

double KlStats::mean_stderr() const {
  NllStats s;  // the same sample statistics
  for (double v : kl) s.add(v);
  return s.mean_stderr();
}

double KlStats::quantile(double q) const {
  if (kl.empty()) return 0.0;
  std::vector<double> sorted = kl;
  std::sort(sorted.begin(), sorted.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

double KlStats::max() const {
  return kl.empty() ? 0.0 : *std::max_element(kl.begin(), kl.end());
}

double KlStats::top1_agreement() const {
  return kl.empty() ? 0.0 : static_cast<double>(top1_agree) / static_cast<double>(kl.size());
}

double KlStats::top1_agreement_stderr() const {
  if (kl.size() < 2) return 0.0;
  const double p = top1_agreement();
  return std::sqrt(p * (1 - p) / static_cast<double>(kl.size() - 1));
}

// ---- the log-prob file ----

Result<std::unique_ptr<LogProbWriter>> LogProbWriter::create(const std::string& path,
                                                             int64_t n_vocab, int64_t n_ctx,
                                                             int64_t n_chunks,
                                                             const std::vector<int32_t>& tokens) {
  if (static_cast<int64_t>(tokens.size()) != n_ctx * n_chunks) {
    return invalid_argument("log-prob file: token count does not match n_ctx * n_chunks");
  }
  HYPURA_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  std::unique_ptr<LogProbWriter> w(new LogProbWriter(std::move(file)));
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.n_vocab = static_cast<uint32_t>(n_vocab);
  h.n_ctx = static_cast<uint32_t>(n_ctx);
  h.n_chunks = static_cast<uint32_t>(n_chunks);
  HYPURA_RETURN_IF_ERROR(w->file_.write(as_bytes(&h, sizeof(h))));
  HYPURA_RETURN_IF_ERROR(w->file_.write(as_bytes(tokens.data(), tokens.size() * sizeof(int32_t))));
  return w;
}

Status LogProbWriter::write_row(const std::vector<double>& log_probs) {
  row_.assign(log_probs.begin(), log_probs.end());
  return file_.write(as_bytes(row_.data(), row_.size() * sizeof(float)));
}

Status LogProbWriter::close() {
  return file_.commit();
}

Result<std::unique_ptr<LogProbReader>> LogProbReader::open(const std::string& path) {
  std::unique_ptr<LogProbReader> r(new LogProbReader());
  r->path_ = path;
  r->f_ = std::fopen(path.c_str(), "rb");
  if (r->f_ == nullptr) return file_error("cannot open", path);
  Header h{};
  if (std::fread(&h, sizeof(h), 1, r->f_) != 1 || std::memcmp(h.magic, kMagic, 8) != 0) {
    return invalid_argument(path + ": not a log-prob file of `hypura perplexity --save-logits`");
  }
  r->n_vocab_ = h.n_vocab;
  r->n_ctx_ = h.n_ctx;
  r->n_chunks_ = h.n_chunks;
  if (r->n_vocab_ < 2 || r->n_vocab_ > kMaxVocab || r->n_ctx_ < 4 || r->n_ctx_ > kMaxCtx ||
      r->n_chunks_ < 1) {
    return invalid_argument(path + ": implausible header (n_vocab " + std::to_string(h.n_vocab) +
                            ", n_ctx " + std::to_string(h.n_ctx) + ", n_chunks " +
                            std::to_string(h.n_chunks) + ")");
  }
  // The size the header promises must be the file's size: a truncated copy fails here,
  // not after minutes of evaluation. Products are checked against the size by division
  // first, so a hostile header cannot wrap them.
  if (std::fseek(r->f_, 0, SEEK_END) != 0) return file_error("cannot seek", path);
  const auto size = static_cast<uint64_t>(std::ftell(r->f_));
  const uint64_t n_ctx = static_cast<uint64_t>(r->n_ctx_),
                 n_vocab = static_cast<uint64_t>(r->n_vocab_);
  const uint64_t per_chunk =
      n_ctx * 4 + static_cast<uint64_t>(scored_per_chunk(r->n_ctx_)) * n_vocab * 4;
  const uint64_t chunks = static_cast<uint64_t>(r->n_chunks_);
  if (chunks > size / per_chunk || sizeof(Header) + chunks * per_chunk != size) {
    return invalid_argument(
        path + ": " + std::to_string(size) +
        " bytes, not what the header promises (truncated or not from this format)");
  }
  std::fseek(r->f_, sizeof(Header), SEEK_SET);
  r->tokens_.resize(chunks * n_ctx);
  if (std::fread(r->tokens_.data(), 4, r->tokens_.size(), r->f_) != r->tokens_.size()) {
    return file_error("cannot read", path);
  }
  for (int32_t t : r->tokens_) {
    if (t < 0 || t >= r->n_vocab_) {
      return invalid_argument(path + ": token id " + std::to_string(t) + " outside the vocabulary");
    }
  }
  return r;
}

LogProbReader::~LogProbReader() {
  if (f_ != nullptr) std::fclose(f_);
}

Status LogProbReader::read_row(std::vector<double>* log_probs) {
  row_.resize(static_cast<size_t>(n_vocab_));
  if (std::fread(row_.data(), sizeof(float), row_.size(), f_) != row_.size()) {
    return file_error("cannot read", path_);
  }
  log_probs->assign(row_.begin(), row_.end());
  return Status::ok();
}

// ---- the evaluation ----

namespace {

// Scores rows [first, n_ctx - 1) of one chunk's logits.
Status score_chunk(const std::vector<float>& logits, const int32_t* chunk, int64_t n_vocab,
                   const PerplexityOptions& o, PerplexityResult* result) {
  std::vector<double> lp, ref_lp;
  for (int64_t j = first_scored(o.n_ctx); j < o.n_ctx - 1; ++j) {
    log_softmax(logits.data() + j * n_vocab, n_vocab, &lp);
    const int32_t next = chunk[j + 1];
    result->nll.add(-lp[static_cast<size_t>(next)]);
    if (o.save != nullptr) HYPURA_RETURN_IF_ERROR(o.save->write_row(lp));
    if (o.compare != nullptr) {
      HYPURA_RETURN_IF_ERROR(o.compare->read_row(&ref_lp));
      result->kl.add(ref_lp, lp, next);
    }
  }
  return Status::ok();
}

// The saved rows must be of this vocabulary and begin with these chunks (a run may score
// fewer chunks than the file holds).
Status check_comparable(const LogProbReader& saved, int64_t n_vocab,
                        const std::vector<int32_t>& chunks) {
  if (saved.n_vocab() != n_vocab) {
    return invalid_argument("the saved logits have a vocabulary of " +
                            std::to_string(saved.n_vocab()) + ", this model " +
                            std::to_string(n_vocab) + ": not the same tokenizer");
  }
  const auto& t = saved.tokens();
  if (chunks.size() > t.size() || !std::equal(chunks.begin(), chunks.end(), t.begin())) {
    return invalid_argument("the saved logits were made on other tokens");
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<int32_t>> make_chunks(const std::vector<int32_t>& tokens, int64_t n_ctx,
                                         int64_t max_chunks, int32_t bos_token) {
  if (n_ctx < 4) return invalid_argument("perplexity: the context must be at least 4 tokens");
  int64_t n_chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
  if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
  if (n_chunks < 1) {
    return invalid_argument("perplexity: " + std::to_string(tokens.size()) +
                            " tokens are fewer than one chunk of " + std::to_string(n_ctx) +
                            " (give more text or a smaller --context)");
  }
  std::vector<int32_t> chunks(tokens.begin(), tokens.begin() + n_chunks * n_ctx);
  if (bos_token >= 0) {
    for (int64_t c = 0; c < n_chunks; ++c) chunks[c * n_ctx] = bos_token;
  }
  return chunks;
}

Result<PerplexityResult> evaluate_perplexity(const EvalFn& eval, int64_t n_vocab,
                                             const std::vector<int32_t>& chunks,
                                             const PerplexityOptions& o) {
  if (o.n_ctx < 4 || chunks.empty() || chunks.size() % o.n_ctx != 0) {
    return invalid_argument("perplexity: chunks must be whole multiples of a context >= 4");
  }
  if (o.compare != nullptr) HYPURA_RETURN_IF_ERROR(check_comparable(*o.compare, n_vocab, chunks));
  PerplexityResult result;
  result.n_ctx = o.n_ctx;
  result.n_chunks = static_cast<int64_t>(chunks.size()) / o.n_ctx;
  std::vector<int32_t> chunk;
  std::vector<float> logits;
  for (int64_t c = 0; c < result.n_chunks; ++c) {
    chunk.assign(chunks.begin() + c * o.n_ctx, chunks.begin() + (c + 1) * o.n_ctx);
    HYPURA_RETURN_IF_ERROR(eval(chunk, &logits));
    if (static_cast<int64_t>(logits.size()) != o.n_ctx * n_vocab) {
      return invalid_argument("perplexity: eval returned the wrong number of logits");
    }
    HYPURA_RETURN_IF_ERROR(score_chunk(logits, chunk.data(), n_vocab, o, &result));
    if (o.progress) o.progress(c + 1, result.n_chunks);
  }
  return result;
}

}  // namespace hypura::eval
