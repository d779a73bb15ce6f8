// The planner's memory accounting: the limits a plan must fit, and the KV cache, work
// buffers and process overhead it must fit beside the weights (docs/PLANNER.md, "Memory
// accounting").
#include <algorithm>
#include <string>

#include "scheduler/planner_internal.h"

namespace hypura::scheduler {
namespace detail {

Limits limits(const profiler::HardwareProfile& p, const Budgets& b) {
  Limits l;
  l.ram = profiler::usable_memory(p.memory, b.reserve_bytes.value_or(p.memory.reserve_bytes));
  if (b.ram_bytes) l.ram = std::min(l.ram, *b.ram_bytes);
  l.unified = p.memory.unified;
  l.has_gpu = b.use_gpu && !p.gpus.empty();
  if (l.has_gpu) {
    const auto& g = p.gpus.front();
    l.gpu = g.free_bytes > 0 ? g.free_bytes : g.total_bytes;
    if (b.gpu_bytes) l.gpu = std::min(l.gpu, *b.gpu_bytes);
  }
  return l;
}

uint64_t work_bytes(const ModelTensors& m, const Budgets& b) {
  uint64_t acts =
      4 * static_cast<uint64_t>(b.n_batch) * static_cast<uint64_t>(4 * m.n_embd + 3 * m.n_ff);
  return acts + 8 * static_cast<uint64_t>(m.n_vocab) +
         4 * static_cast<uint64_t>(m.n_head * b.n_ctx);
}

// The GPU's work buffers: the runtime's own figure for its GPU blocks when it gave one
// (Budgets::gpu_work_bytes: prompt-sized rows, the F16 tile of the prefill products, the
// BLAS workspace), never less than the host's estimate.
uint64_t gpu_work_bytes(const ModelTensors& m, const Budgets& b) {
  return std::max(work_bytes(m, b), b.gpu_work_bytes);
}

uint64_t kv_bytes(const ModelTensors& m, const Budgets& b) {
  return m.kv_elements_per_token * static_cast<uint64_t>(b.n_ctx) *
         static_cast<uint64_t>(b.kv_bytes_per_element) *
         static_cast<uint64_t>(std::max(1, b.n_seq));
}

std::vector<uint64_t> layer_bytes(const ModelTensors& m, bool experts_only) {
  std::vector<uint64_t> bytes(static_cast<size_t>(std::max(0, m.n_layer)), 0);
  for (const TensorDesc& t : m.tensors) {
    if (t.layer < 0 || t.layer >= m.n_layer) continue;
    if (!experts_only || model::is_moe_expert(t.role))
      bytes[static_cast<size_t>(t.layer)] += t.bytes;
  }
  return bytes;
}

// Host memory the expert cache leaves unallocated: the cache takes everything else, so
// what the ledger does not see (allocator slack, I/O rings, thread stacks, page tables)
// must fit here.
uint64_t expert_cache_margin(const CostModel& c, uint64_t ram_limit) {
  return std::max(c.expert_cache_margin_min_bytes,
                  static_cast<uint64_t>(c.expert_cache_margin * static_cast<double>(ram_limit)));
}

// The KV cache and work buffers grow with n_ctx, which comes from flags and the model's
// metadata (both untrusted): products that wrap would make a huge context "fit" and its
// allocation abort. Refuse sizes past 2^60 bytes (far beyond any machine, and sums of a
// few of them still cannot wrap).
Status check_context_sizes(const ModelTensors& m, const Budgets& b) {
  constexpr uint64_t kMaxBytes = uint64_t{1} << 60;
  if (b.n_ctx <= 0) return invalid_argument("context length must be positive");
  if (b.n_seq < 1 || b.n_seq > 256) return invalid_argument("parallel sequences must be 1..256");
  const auto n_ctx = static_cast<uint64_t>(b.n_ctx);
  uint64_t per_token = 0, kv_one = 0, kv = 0, scores = 0;
  const bool overflow =
      __builtin_mul_overflow(m.kv_elements_per_token, static_cast<uint64_t>(b.kv_bytes_per_element),
                             &per_token) ||
      __builtin_mul_overflow(per_token, n_ctx, &kv_one) ||
      __builtin_mul_overflow(kv_one, static_cast<uint64_t>(b.n_seq), &kv) ||
      __builtin_mul_overflow(static_cast<uint64_t>(std::max<int64_t>(1, m.n_head)) * 4, n_ctx,
                             &scores);
  if (overflow || kv > kMaxBytes || scores > kMaxBytes) {
    return invalid_argument(
        "context length " + std::to_string(b.n_ctx) +
        " is too large: its KV cache would exceed 2^60 bytes (lower --context)");
  }
  return Status::ok();
}

}  // namespace detail

int default_parallel(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b) {
  Budgets one = b;
  one.n_seq = 1;
  const uint64_t kv = std::max<uint64_t>(detail::kv_bytes(m, one), 1);
  const uint64_t fit = detail::limits(p, b).ram / 4 / kv;
  return static_cast<int>(std::clamp<uint64_t>(fit, 1, kDefaultMaxParallel));
}

int gpu_parallel(const ModelTensors& m, const Plan& plan) {
  const MemoryPlan& mem = plan.memory;
  const int n = std::max(1, plan.n_seq);
  if (mem.unified || plan.gpu.layers < m.n_layer || !plan.gpu.head || mem.kv_gpu == 0) return n;
  const uint64_t kv_one = std::max<uint64_t>(mem.kv_gpu / static_cast<uint64_t>(n), 1);
  const uint64_t used = mem.gpu_total();
  const uint64_t more = (mem.gpu_limit > used ? mem.gpu_limit - used : 0) / 2 / kv_one;
  return static_cast<int>(std::clamp<uint64_t>(n + more, n, std::max(n, kGpuMaxParallel)));
}

uint64_t process_overhead_bytes(const ModelTensors& m, const CostModel& c) {
  return c.process_base_bytes + c.process_slack_bytes +
         c.metadata_element_bytes * m.metadata_array_elements + c.token_bytes * m.n_tokens +
         c.merge_bytes * m.n_merges +
         c.vocab_sampling_bytes * static_cast<uint64_t>(std::max<int64_t>(m.n_vocab, 0));
}

uint64_t Plan::bytes_on(const ModelTensors& m, Tier tier) const {
  uint64_t total = 0;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] == tier) total += m.tensors[i].bytes;
  }
  return total;
}

}  // namespace hypura::scheduler
