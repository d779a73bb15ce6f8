#include "eval/mmap_baseline.h"

#include <chrono>
#include <random>

#include "common/size.h"
#include "compute/compute.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "profiler/system_info.h"
#include "tiers/memory_ledger.h"
#include "tiers/mmap_provider.h"

namespace hypura::eval {

Status mmap_baseline_allowed(const gguf::GgufFile& file, bool force) {
  const profiler::MemoryProfile mem = profiler::probe_memory(0);
  const uint64_t ram = mem.effective_limit_bytes;
  const uint64_t allowed = ram > kBaselineReserveBytes ? ram - kBaselineReserveBytes : 0;
  if (force || file.total_bytes() <= allowed) return Status::ok();
  return resource_exhausted("--baseline refused: the model (" + format_size(file.total_bytes()) +
                            ") exceeds RAM (" + format_size(ram) + ") minus the " +
                            format_size(kBaselineReserveBytes) +
                            " reserve; plain mmap would thrash the page cache (--force runs it)");
}

Result<BaselineResult> run_mmap_baseline(const gguf::GgufFile& file, int n_tokens, int n_threads,
                                         int64_t n_ctx) {
  HYPURA_ASSIGN_OR_RETURN(std::shared_ptr<const model::Model> model, model::Model::create(file));
  HYPURA_ASSIGN_OR_RETURN(std::unique_ptr<tiers::MmapProvider> provider,
                          tiers::MmapProvider::open(file));
  compute::Context ctx(n_threads);
  const int64_t ctx_len = std::min<int64_t>(n_ctx, n_tokens + 2);
  model::KvCache kv(model->hparams(), ctx_len, false);
  model::Forward fwd(model, ctx, *provider, 1, ctx_len);
  std::vector<float> logits(static_cast<size_t>(model->hparams().n_vocab));
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(0,
                                              static_cast<int32_t>(model->hparams().n_vocab - 1));
  int32_t tok = dist(rng);
  HYPURA_RETURN_IF_ERROR(fwd.run(&tok, 1, 0, kv, false, logits.data()));  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n_tokens; ++i) {
    tok = dist(rng);
    HYPURA_RETURN_IF_ERROR(fwd.run(&tok, 1, i + 1, kv, false, logits.data()));
  }
  BaselineResult r;
  r.tokens = n_tokens;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tg_tok_s = r.seconds > 0 ? n_tokens / r.seconds : 0;
  r.peak_rss = tiers::peak_rss_bytes();
  return r;
}

}  // namespace hypura::eval
