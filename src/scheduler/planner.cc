// place(): choose what streams from storage, then split the resident rest between GPU and
// RAM; evaluate(): the memory accounting and the cost model (a small pipeline simulation
// of prefetched reads against per-layer compute). docs/PLANNER.md derives both.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <numeric>
#include <tuple>
#include <utility>

#include "common/size.h"
#include "scheduler/plan.h"

namespace hypura::scheduler {
namespace {

using model::TensorRole;
using profiler::HardwareProfile;

constexpr uint64_t kAlign = 4096;
uint64_t align_up(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

// Streaming classes, streamed in this order (docs/PLANNER.md: ratio of I/O added per
// byte of memory freed, lowest first).
enum class StreamClass { kNever = 0, kExperts = 1, kDenseFfn = 2, kAttention = 3, kOutputHead = 4 };

StreamClass stream_class(const TensorDesc& t) {
  if (model::is_moe_expert(t.role)) return StreamClass::kExperts;
  if (model::is_dense_ffn(t.role) || t.role == TensorRole::kSharedExpert) {
    // Matrices of any size (small models' FFN matrices are 0.5 MiB); shared-expert gates
    // are vectors, read every token and too small to free anything.
    return t.row_bytes > 0 && t.row_bytes < t.bytes ? StreamClass::kDenseFfn : StreamClass::kNever;
  }
  switch (t.role) {
    case TensorRole::kAttnQ:
    case TensorRole::kAttnK:
    case TensorRole::kAttnV:
    case TensorRole::kAttnQkv:
    case TensorRole::kAttnOutput:
      return StreamClass::kAttention;
    case TensorRole::kOutput:
      // Its own class, streamed last: it is one group as large as several layers, so
      // streaming it makes every pool slot that large (Qwen2.5-0.5B: 138 MiB slots).
      return StreamClass::kOutputHead;
    case TensorRole::kTokenEmbedding:
      // The runtime keeps the token embedding resident (a pass needs rows it cannot know
      // before the pass; a tied one is the output head too), and the plan is what runs.
      return StreamClass::kNever;
    case TensorRole::kOther:
      return t.bytes >= (uint64_t{16} << 20) ? StreamClass::kAttention : StreamClass::kNever;
    default:
      return StreamClass::kNever;  // norms, biases, router, rope factors: small, always hot
  }
}

// Layer index used for pipelining: the output head computes after the last layer.
int pipeline_layer(const ModelTensors& m, const TensorDesc& t) {
  if (t.layer >= 0) return std::min(t.layer, m.n_layer - 1);
  return t.role == TensorRole::kTokenEmbedding ? 0 : m.n_layer;
}

// k of n items spread evenly (streamed layers interleaved with resident ones keep the
// device busy while resident layers compute; a block of them would leave it idle).
std::vector<int> spread(int k, int n) {
  std::vector<int> out;
  for (int i = 0; i < k; ++i)
    out.push_back(static_cast<int>((2 * static_cast<int64_t>(i) + 1) * n / (2 * k)));
  return out;
}

struct Limits {
  uint64_t ram = 0, gpu = 0;
  bool has_gpu = false, unified = false;
  // A discrete GPU's tensors, chosen before the RAM/storage search (gpu_suffix): the
  // search neither streams nor counts them. Empty: no discrete GPU (or a unified one,
  // where assign_gpu splits the resident tensors instead).
  std::vector<bool> gpu_fixed;
};

Limits limits(const HardwareProfile& p, const Budgets& b) {
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

bool is_head(const TensorDesc& t) {
  return t.role == TensorRole::kOutput || t.role == TensorRole::kOutputNorm;
}

// The tensor the output head multiplies by: `output`, or the token embedding when tied.
const TensorDesc* head_matrix(const ModelTensors& m) {
  const TensorDesc* embd = nullptr;
  for (const TensorDesc& t : m.tensors) {
    if (t.role == TensorRole::kOutput) return &t;
    if (t.role == TensorRole::kTokenEmbedding) embd = &t;
  }
  return embd;
}
bool tied_head(const ModelTensors& m) {
  const TensorDesc* h = head_matrix(m);
  return h != nullptr && h->role == TensorRole::kTokenEmbedding;
}

// Per-layer weight bytes (layer index -> bytes of its tensors; experts_only: of its
// routed experts' stacked tensors).
std::vector<uint64_t> layer_bytes(const ModelTensors& m, bool experts_only = false) {
  std::vector<uint64_t> bytes(static_cast<size_t>(std::max(0, m.n_layer)), 0);
  for (const TensorDesc& t : m.tensors) {
    if (t.layer < 0 || t.layer >= m.n_layer) continue;
    if (!experts_only || model::is_moe_expert(t.role))
      bytes[static_cast<size_t>(t.layer)] += t.bytes;
  }
  return bytes;
}

// What a split (some layers on the CPU) costs the GPU beyond the layers it holds: prompts
// run every layer there (runtime: StagedWeights, KvCache's mirror, the same GPU blocks),
// so it holds every layer's KV rows and a slot for the largest host layer.
// `bytes`: layer_bytes(m).
uint64_t split_overhead(const ModelTensors& m, const Budgets& b, const std::vector<uint64_t>& bytes,
                        int first_gpu_layer) {
  const uint64_t slot =
      first_gpu_layer > 0 ? *std::max_element(bytes.begin(), bytes.begin() + first_gpu_layer) : 0;
  return kv_bytes(m, b) + slot;
}

// The GPU's fixed share: work buffers, the CUDA context, the head (output norm and matrix).
uint64_t gpu_fixed_bytes(const ModelTensors& m, const Budgets& b, const CostModel& c) {
  const TensorDesc* head = head_matrix(m);
  uint64_t fixed = gpu_work_bytes(m, b) + c.gpu_context_bytes + (head != nullptr ? head->bytes : 0);
  for (const TensorDesc& t : m.tensors) fixed += t.role == TensorRole::kOutputNorm ? t.bytes : 0;
  return fixed;
}

// Marks the head, the tensors of layers >= first and, when it fits in `room` (or is the
// tied head, already counted), the token embedding.
std::vector<bool> gpu_tensors_from(const ModelTensors& m, int first, uint64_t room) {
  std::vector<bool> on(m.tensors.size(), false);
  for (size_t i = 0; i < on.size(); ++i) {
    const TensorDesc& t = m.tensors[i];
    on[i] = is_head(t) || t.layer >= first;
    if (t.role == TensorRole::kTokenEmbedding && first == 0 && (tied_head(m) || t.bytes <= room))
      on[i] = true;
  }
  return on;
}

// A discrete GPU computes a suffix of the layers and the output head (the CPU the layers
// before it, from RAM or storage), so a decode step crosses the bus twice: the residual
// rows up, the logits down. The head goes first (read by every token, and the last op),
// then whole layers from the last one down while they fit beside the work buffers, the
// CUDA context and the split's own costs (split_overhead); the token embedding joins
// when every layer is there (a CPU stage embeds from RAM otherwise). A tied head's
// embedding is then on both: in RAM for the embedding and copied to the GPU for the head.
std::vector<bool> gpu_suffix(const ModelTensors& m, const Budgets& b, const CostModel& c,
                             const Limits& lim) {
  const uint64_t fixed = gpu_fixed_bytes(m, b, c);
  if (!lim.has_gpu || lim.gpu < fixed) return std::vector<bool>(m.tensors.size(), false);
  const std::vector<uint64_t> bytes = layer_bytes(m);
  const uint64_t all_layers = std::accumulate(bytes.begin(), bytes.end(), uint64_t{0});
  const int cap = b.max_gpu_layers < 0 ? m.n_layer : std::min(m.n_layer, b.max_gpu_layers);
  int first = 0;
  uint64_t room = 0;
  if (cap == m.n_layer && fixed + all_layers + kv_bytes(m, b) <= lim.gpu) {
    room = lim.gpu - fixed - all_layers - kv_bytes(m, b);
  } else {
    first = m.n_layer;
    uint64_t held = 0;  // the weights of layers first..
    const int lowest = m.n_layer - cap;
    while (first > lowest) {
      const uint64_t with_next = held + bytes[static_cast<size_t>(first - 1)];
      if (fixed + split_overhead(m, b, bytes, first - 1) + with_next > lim.gpu) break;
      held = with_next;
      --first;
    }
    if (first == m.n_layer && fixed + split_overhead(m, b, bytes, first) > lim.gpu)
      return std::vector<bool>(m.tensors.size(), false);  // not even the head
  }
  return gpu_tensors_from(m, first, room);
}

// A MoE model that does not fit whole: the expert split (llama.cpp's --n-cpu-moe, chosen
// by the budget). A token reads all of every layer's attention, router and norms but only
// n_used of n_expert experts, so the GPU takes everything but the routed experts (every
// layer's attention and KV cache, the head, the embedding when it fits), then the experts
// of whole layers from the last one down while they fit; the other layers' experts stay
// in RAM and the CPU computes them (HostExperts; place() falls back to whole layers when
// they would have to stream from storage). Prompts copy
// the host experts of one layer at a time into a slot over the bus (StagedWeights), which
// the GPU holds too. Empty when even the part without experts does not fit.
std::vector<bool> gpu_expert_split(const ModelTensors& m, const Budgets& b, const CostModel& c,
                                   const Limits& lim) {
  const std::vector<uint64_t> layers = layer_bytes(m),
                              experts = layer_bytes(m, /*experts_only=*/true);
  uint64_t need = gpu_fixed_bytes(m, b, c) + kv_bytes(m, b) +
                  *std::max_element(experts.begin(), experts.end());  // the prompts' slot
  for (size_t L = 0; L < layers.size(); ++L) need += layers[L] - experts[L];
  if (!lim.has_gpu || need > lim.gpu) return {};
  uint64_t room = lim.gpu - need;
  int first = m.n_layer;  // the first layer whose experts are on the GPU
  const int lowest = std::clamp(b.min_host_expert_layers, 0, m.n_layer);
  while (first > lowest && experts[static_cast<size_t>(first - 1)] <= room) {
    room -= experts[static_cast<size_t>(first - 1)];
    --first;
  }
  std::vector<bool> on = gpu_tensors_from(m, 0, room);
  for (size_t i = 0; i < on.size(); ++i) {
    const TensorDesc& t = m.tensors[i];
    if (model::is_moe_expert(t.role) && t.layer < first) on[i] = false;
  }
  return on;
}

// The GPU's tensors: everything when it fits (and --cpu-moe-layers asks for no host
// experts), else for a MoE model the expert split (unless --gpu-layers asks for whole
// layers), else a suffix of whole layers.
std::vector<bool> gpu_placement(const ModelTensors& m, const Budgets& b, const CostModel& c,
                                const Limits& lim, bool expert_split) {
  std::vector<bool> on = gpu_suffix(m, b, c, lim);
  bool every_layer = true;
  for (size_t i = 0; i < on.size(); ++i) every_layer &= on[i] || m.tensors[i].layer < 0;
  const bool asked = b.min_host_expert_layers > 0;
  if ((every_layer && !asked) || !expert_split || m.n_expert == 0 || b.max_gpu_layers >= 0)
    return on;
  std::vector<bool> split = gpu_expert_split(m, b, c, lim);
  return split.empty() ? on : split;
}

Limits limits_for(const ModelTensors& m, const HardwareProfile& p, const Budgets& b,
                  const CostModel& c, bool expert_split = true) {
  Limits l = limits(p, b);
  if (l.has_gpu && !l.unified) l.gpu_fixed = gpu_placement(m, b, c, l, expert_split);
  return l;
}

}  // namespace

int default_parallel(const ModelTensors& m, const HardwareProfile& p, const Budgets& b) {
  Budgets one = b;
  one.n_seq = 1;
  const uint64_t kv = std::max<uint64_t>(kv_bytes(m, one), 1);
  const uint64_t fit = limits(p, b).ram / 4 / kv;
  return static_cast<int>(std::clamp<uint64_t>(fit, 1, kDefaultMaxParallel));
}

namespace {

// The KV cache and work buffers grow with n_ctx, which comes from flags and the model's
// metadata (both untrusted): a context of 2^62 tokens wrapped the products above to small
// numbers, the plan "fit", and the allocation aborted. Refuse sizes past 2^60 bytes (far
// beyond any machine, and sums of a few of them still cannot wrap).
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

// Seconds to read one `bytes` range at queue depth 1 beyond the streaming rate: the
// latency a demand read cannot hide (from the 1 MiB random figure; 100 us if unmeasured).
double read_latency_s(const profiler::StorageProfile& s) {
  double r1m = s.random_bps(1 << 20, 1);
  if (r1m <= 0 || s.seq_read_bps <= 0) return 100e-6;
  return std::max(0.0, (1 << 20) / r1m - (1 << 20) / s.seq_read_bps);
}

// Dense streaming's device reads: request size, queue depth, and the rate they reach.
struct StreamIo {
  uint64_t request_bytes = 0;
  uint32_t queue_depth = 0;
  double bps = 0;
};

constexpr double kMinSegmentShare = 0.7;

// Segments a request of `bytes` becomes when cut into `block`-byte device reads.
uint64_t segments(uint64_t bytes, uint64_t block) {
  return (bytes + block - 1) / block;
}

// How fast dense streaming reads, and with what request size and queue depth, given the
// streamed tensors' sizes and the bytes the pool keeps queued (`in_flight`: with `depth`
// layers read ahead, the next layer's reads complete while depth - 1 more are queued and
// the one after is submitted: about (depth - 1/2) x a layer on average).
//
// Each grid point (block b, depth q) of the profile is the disk at q reads of b in flight.
// A point is reachable when the pool queues at least its b x q bytes and the tensors cut
// into b-byte requests are device reads of about b: on average `mean_seg` >= 70% of b (a
// 3 MiB tensor read in 16 MiB requests is one 3 MiB read, which the 16 MiB point does not
// measure); the queue depth is raised to b x q / mean_seg so that the segments hold those
// bytes (the profile's points all run >= 32 MiB ranges). Of the reachable points the fastest gives
// the rate, scaled so that the grid's best is the profile's headline figure (the bound).
// Below every point's bytes (tiny layers) the rate scales with the bytes in flight (the
// latency of the smallest point's reads bounds it). A profile without a grid streams at
// the headline figure with its best point's request size and depth.
StreamIo stream_io(const profiler::StorageProfile& st, const std::vector<uint64_t>& tensor_bytes,
                   double in_flight, uint32_t max_queue_depth) {
  StreamIo io;
  io.request_bytes = st.best_block_bytes ? st.best_block_bytes : uint64_t{1} << 20;
  io.queue_depth = st.best_queue_depth ? st.best_queue_depth : 32;
  io.bps = st.seq_read_bps;
  double grid_best = 0;
  for (const auto& pt : st.sequential) grid_best = std::max(grid_best, pt.bps);
  if (grid_best <= 0 || tensor_bytes.empty() || st.sequential.size() < 2) return io;
  const double scale = st.seq_read_bps / grid_best;
  uint64_t total = 0;
  for (uint64_t b : tensor_bytes) total += b;
  // A point's rate is the best of the points with no larger block and depth: more bytes in
  // flight do not slow a disk down, and the envelope keeps one noisy 0.25 s point from
  // choosing a shallow pattern over a deeper one that measured a hair less.
  const auto envelope = [&](const profiler::SeqReadPoint& p) {
    double best = 0;
    for (const auto& q : st.sequential) {
      if (q.block_bytes <= p.block_bytes && q.queue_depth <= p.queue_depth)
        best = std::max(best, q.bps);
    }
    return best;
  };
  const profiler::SeqReadPoint* best = nullptr;
  const profiler::SeqReadPoint* smallest = nullptr;
  uint32_t best_depth = 0;
  double best_bps = 0;
  for (const auto& pt : st.sequential) {
    const double want = static_cast<double>(pt.block_bytes) * pt.queue_depth;
    if (!smallest || want < static_cast<double>(smallest->block_bytes) * smallest->queue_depth)
      smallest = &pt;
    if (want > in_flight) continue;
    uint64_t n_seg = 0;
    for (uint64_t b : tensor_bytes) n_seg += segments(b, pt.block_bytes);
    const double mean_seg = static_cast<double>(total) / static_cast<double>(n_seg);
    if (mean_seg < kMinSegmentShare * static_cast<double>(pt.block_bytes))
      continue;  // not this point's reads
    const double depth = std::max<double>(pt.queue_depth, std::ceil(want / mean_seg));
    if (depth > max_queue_depth) continue;
    const double bps = envelope(pt);
    const bool more_in_flight =
        best && want > static_cast<double>(best->block_bytes) * best->queue_depth;
    if (!best || bps > best_bps || (bps == best_bps && more_in_flight)) {
      best = &pt;
      best_bps = bps;
      best_depth = static_cast<uint32_t>(depth);
    }
  }
  if (best) {
    io.request_bytes = best->block_bytes;
    io.queue_depth = best_depth;
    io.bps = best_bps * scale;
    return io;
  }
  const double want = static_cast<double>(smallest->block_bytes) * smallest->queue_depth;
  io.request_bytes = smallest->block_bytes;
  io.queue_depth =
      std::min<uint32_t>(max_queue_depth, std::max<uint32_t>(smallest->queue_depth, 1));
  io.bps = smallest->bps * scale * std::max(0.0, in_flight) / want;
  return io;
}

// A layer's streamed tensors as the streaming pool reads and lays them out: file
// neighbours (gaps of at most one 4 KiB block) are one read, as StreamingProvider merges
// them (tiers::merge_runs); tensors of synthetic shapes (no file) are one read each.
// Each read sits in the slot at its file offset's residue modulo 4 KiB (O_DIRECT), so the
// slot is what the runtime allocates, byte for byte; a tensor with no file position gets
// the worst case, one spare block.
struct LayerReads {
  std::vector<uint64_t> sizes;  // one per device request
  uint64_t slot_bytes = 0;
};

LayerReads layer_reads(std::vector<const TensorDesc*> layer) {
  std::sort(layer.begin(), layer.end(), [](const TensorDesc* a, const TensorDesc* b) {
    return std::tie(a->split, a->offset) < std::tie(b->split, b->offset);
  });
  LayerReads r;
  uint64_t cursor = 0, run_head = 0, run_end = 0;
  const auto close_run = [&] {
    if (r.sizes.empty()) return;
    const uint64_t at = align_up(cursor) + run_head;
    cursor = at + r.sizes.back();
  };
  for (size_t i = 0; i < layer.size(); ++i) {
    const TensorDesc& t = *layer[i];
    const bool joins = i > 0 && t.file_index >= 0 && layer[i - 1]->file_index >= 0 &&
                       t.split == layer[i - 1]->split && t.offset <= run_end + kAlign;
    if (joins) {
      r.sizes.back() += t.offset + t.bytes - run_end;
    } else {
      close_run();
      r.sizes.push_back(t.bytes);
      run_head = t.file_index >= 0 ? t.offset % kAlign : kAlign;
    }
    run_end = t.offset + t.bytes;
  }
  close_run();
  r.slot_bytes = align_up(cursor);
  return r;
}

// Weight bytes per second the tier computes a tensor of `type` with rows of n_cols at, for
// one token. The CPU: the profile's decode rate of the type at the nearest measured width
// (its kernels and memory bus together: a 2-core
// VM's Q4_K decode is bound by arithmetic, a server's by the bus), else the memory
// bandwidth times cpu_efficiency (profiles without the probe, types it does not measure).
double bandwidth(const HardwareProfile& p, const CostModel& c, Tier tier, gguf::GgmlType type,
                 int64_t n_cols) {
  const double decode = p.cpu.decode_bps(type, n_cols);
  double ram = decode > 0 ? decode : std::max(1e9, p.memory.read_bandwidth_bps) * c.cpu_efficiency;
  if (tier != Tier::kGpu || p.gpus.empty()) return ram;
  double gpu = p.gpus.front().memory_bandwidth_bps;
  return gpu > 0 ? gpu * c.gpu_efficiency : ram;
}

// Pool jobs one generated token runs with a tensor, each paying the CPU's fixed cost per
// product (CpuProfile::decode_overhead_s): one per weight matrix, but Q/K/V and a dense
// FFN's gate/up share their input and run as one job (Context::matmul_shared: K, V and up
// count none); n_expert_used per stacked expert tensor; one for a token embedding that is
// also the head (read whole); none for norms, biases and an embedding's row lookup.
double products_per_token(const ModelTensors& m, const TensorDesc& t) {
  using model::TensorRole;
  if (model::is_moe_expert(t.role))
    return static_cast<double>(std::max<int64_t>(m.n_expert_used, 1));
  switch (t.role) {
    case TensorRole::kTokenEmbedding:
      return t.access_per_token >= 1.0 ? 1.0 : 0.0;
    case TensorRole::kOutput:
    case TensorRole::kAttnQ:
    case TensorRole::kAttnQkv:
    case TensorRole::kAttnOutput:
    case TensorRole::kFfnGate:
    case TensorRole::kFfnDown:
    case TensorRole::kMoeRouter:
    case TensorRole::kSharedExpert:
      return 1.0;
    default:
      return 0.0;
  }
}

// Seconds one generated token computes with tensor t on `tier`: its bytes at the tier's
// rate plus, on the CPU, each product's fixed cost.
double tensor_compute_s(const ModelTensors& m, const TensorDesc& t, const HardwareProfile& p,
                        const CostModel& c, Tier tier) {
  const double touched = t.access_per_token * static_cast<double>(t.bytes);
  const double fixed = tier == Tier::kGpu && !p.gpus.empty()
                           ? 0.0
                           : products_per_token(m, t) * p.cpu.decode_overhead_s(t.type, t.n_cols);
  return touched / bandwidth(p, c, tier, t.type, t.n_cols) + fixed;
}

bool has_recorded_routing(const ModelTensors& m) {
  const double total = std::accumulate(m.expert_frequency.begin(), m.expert_frequency.end(), 0.0);
  return m.n_expert > 0 &&
         m.expert_frequency.size() == static_cast<size_t>(m.n_layer * m.n_expert) && total > 0;
}

// Expected hit rate of an expert cache of `slots` experts, per pipeline layer (those with
// experts; others 1). With recorded routing the cache is assumed to hold the `slots` most
// often routed (layer, expert) pairs, and a layer hits with the share of its routings that
// went to its cached experts: on the "moe" synthetic's statistics this predicts 95.4% at
// 116 of 192 experts, measured 95.2% (docs/MOE.md). Without, routing is uniform and every
// layer hits with slots / experts_total.
std::vector<double> expected_layer_hits(const ModelTensors& m,
                                        const std::vector<uint64_t>& expert_bytes_layer,
                                        uint64_t slots, uint64_t experts_total) {
  const size_t n_pipe = expert_bytes_layer.size();
  const double uniform =
      experts_total ? static_cast<double>(slots) / static_cast<double>(experts_total) : 1.0;
  std::vector<double> hit(n_pipe, 1.0);
  for (size_t L = 0; L < n_pipe; ++L) hit[L] = expert_bytes_layer[L] > 0 ? uniform : 1.0;
  if (!has_recorded_routing(m)) return hit;
  struct Entry {
    double freq;
    size_t layer;
  };
  std::vector<Entry> entries;
  std::vector<double> layer_total(n_pipe, 0.0), layer_cached(n_pipe, 0.0);
  for (size_t L = 0; L < static_cast<size_t>(m.n_layer) && L < n_pipe; ++L) {
    if (expert_bytes_layer[L] == 0) continue;
    for (int64_t e = 0; e < m.n_expert; ++e) {
      const double f =
          m.expert_frequency[L * static_cast<size_t>(m.n_expert) + static_cast<size_t>(e)];
      entries.push_back({f, L});
      layer_total[L] += f;
    }
  }
  const size_t keep = std::min<size_t>(slots, entries.size());
  std::partial_sort(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(keep),
                    entries.end(), [](const Entry& a, const Entry& b) { return a.freq > b.freq; });
  for (size_t i = 0; i < keep; ++i) layer_cached[entries[i].layer] += entries[i].freq;
  for (size_t L = 0; L < n_pipe; ++L) {
    if (expert_bytes_layer[L] > 0 && layer_total[L] > 0) hit[L] = layer_cached[L] / layer_total[L];
  }
  return hit;
}

// Expected stall of one MoE layer for one token: k of its n_used routed experts miss with
// probability Binomial(n_used, miss), their reads take k x one_read on the device, and
// the compute of the n_used - k cached ones (expert_compute_s is all n_used) hides at most
// that much: a missed expert computes after its own read. The expectation of the stall,
// not the stall of the expected misses: a miss is one whole expert read (10-19 ms for the
// "moe" synthetic's 21 MiB experts) against ~1 ms of compute per expert, so rare misses
// are waited for nearly whole (measured: every miss is waited for, docs/MOE.md), which
// max(0, mean io - compute) missed (predicted 13.3 tok/s, measured 9.2).
double expected_miss_stall(int n_used, double miss, double one_read, double expert_compute_s) {
  double stall = 0, p_k = std::pow(1 - miss, n_used);  // P(k = 0)
  for (int k = 1; k <= n_used; ++k) {
    p_k *= miss / std::max(1e-300, 1 - miss) * (n_used - k + 1) / k;
    if (miss >= 1) p_k = k == n_used ? 1.0 : 0.0;
    const double hidden_s = expert_compute_s * (n_used - k) / n_used;
    stall += p_k * std::max(0.0, k * one_read - hidden_s);
  }
  return stall;
}

// Per-layer quantities of the pipeline (index n_layer is the output head).
struct LayerCosts {
  std::vector<double> compute_s;    // all tensors of the layer, on their tier's bandwidth
  std::vector<double> read_s;       // prefetchable storage reads (dense tensors)
  std::vector<double> demand_s;     // stall of reads known only when the layer runs (expert
                                    // misses): the part the layer's own compute cannot hide
  std::vector<double> demand_io_s;  // device busy time of those reads (>= demand_s)
};

// Steady-state seconds per token: reads in layer order on one device, at most `slots`
// streamed layers in memory (read or being computed), compute in order. Four tokens are
// simulated and the last one timed, so pipeline fill is excluded and reads for the next
// token overlap the end of the current one, as in the runtime.
double simulate(const LayerCosts& lc, int slots) {
  size_t n = lc.compute_s.size();
  std::vector<double> streamed_end;  // compute end of each streamed layer instance
  double compute_end = 0, io_free = 0, token_start = 0;
  constexpr int kTokens = 4;
  for (int tok = 0; tok < kTokens; ++tok) {
    token_start = compute_end;
    for (size_t l = 0; l < n; ++l) {
      double ready = compute_end;
      if (lc.read_s[l] > 0) {
        size_t q = streamed_end.size();
        double slot_free = q >= static_cast<size_t>(slots) ? streamed_end[q - slots] : 0.0;
        double read_end = std::max(io_free, slot_free) + lc.read_s[l];
        io_free = read_end;
        ready = std::max(ready, read_end);
      }
      double start = ready;
      if (lc.demand_io_s[l] > 0)
        io_free = std::max(io_free, start) + lc.demand_io_s[l];  // same device
      compute_end = start + lc.compute_s[l] + lc.demand_s[l];
      if (lc.read_s[l] > 0) streamed_end.push_back(compute_end);
    }
  }
  return compute_end - token_start;
}

// Host memory the expert cache leaves unallocated: the cache takes everything else, so
// what the ledger does not see (allocator slack, I/O rings, thread stacks, page tables)
// must fit here.
uint64_t expert_cache_margin(const CostModel& c, uint64_t ram_limit) {
  return std::max(c.expert_cache_margin_min_bytes,
                  static_cast<uint64_t>(c.expert_cache_margin * static_cast<double>(ram_limit)));
}

Mode derive_mode(const ModelTensors& m, const std::vector<Tier>& tiers) {
  bool any = false, only_experts = true, only_dense = true;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] != Tier::kStorage) continue;
    any = true;
    only_experts &= model::is_moe_expert(m.tensors[i].role);
    only_dense &= model::is_dense_ffn(m.tensors[i].role);
  }
  if (!any) return Mode::kFullResident;
  if (only_experts) return Mode::kExpertStreaming;
  if (only_dense) return Mode::kDenseFfnStreaming;
  return Mode::kFullStreaming;
}

// Splits the resident tensors (tiers != storage) between GPU and RAM: the GPU takes what
// each token reads most per byte first (dense before experts; the embedding, read one
// row per token, stays in RAM), in layer order with the output head first, first fit.
// A layer's KV cache lives where its attention computes.
void assign_gpu(const ModelTensors& m, const Budgets& b, const CostModel& c, const Limits& lim,
                std::vector<Tier>& tiers) {
  for (auto& t : tiers) {
    if (t == Tier::kGpu) t = Tier::kRam;
  }
  if (!lim.has_gpu) return;
  uint64_t fixed = gpu_work_bytes(m, b) + c.gpu_context_bytes;
  if (lim.gpu <= fixed) return;
  uint64_t room = lim.gpu - fixed;
  uint64_t kv_layer = kv_bytes(m, b) / std::max(1, m.n_layer);
  std::vector<size_t> order;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] == Tier::kRam && m.tensors[i].role != TensorRole::kTokenEmbedding)
      order.push_back(i);
  }
  auto key = [&](size_t i) {
    const TensorDesc& t = m.tensors[i];
    int layer = t.layer < 0 ? -1 : t.layer;
    return std::make_tuple(-std::round(t.access_per_token * 1e6), layer, i);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t bb) { return key(a) < key(bb); });
  std::vector<bool> kv_on_gpu(static_cast<size_t>(std::max(1, m.n_layer)), false);
  for (size_t i : order) {
    const TensorDesc& t = m.tensors[i];
    uint64_t need = t.bytes;
    bool attn = model::is_attention(t.role) && t.layer >= 0;
    if (attn && !kv_on_gpu[static_cast<size_t>(t.layer)]) need += kv_layer;
    if (need > room) continue;
    room -= need;
    tiers[i] = Tier::kGpu;
    if (attn) kv_on_gpu[static_cast<size_t>(t.layer)] = true;
  }
}

std::string gib(uint64_t bytes) {
  return format_size(bytes);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kGpu:
      return "gpu";
    case Tier::kRam:
      return "ram";
    case Tier::kStorage:
      return "storage";
  }
  return "?";
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kFullResident:
      return "full-resident";
    case Mode::kExpertStreaming:
      return "expert-streaming";
    case Mode::kDenseFfnStreaming:
      return "dense-ffn-streaming";
    case Mode::kFullStreaming:
      return "full-streaming";
  }
  return "?";
}

GpuSplit gpu_split_of(const ModelTensors& m, const std::vector<Tier>& tiers) {
  GpuSplit g;
  // Per layer: everything but the routed experts on the GPU; the experts too.
  std::vector<bool> layer_on(static_cast<size_t>(std::max(0, m.n_layer)), true);
  std::vector<bool> experts_on(layer_on.size(), true);
  bool any_layer_tensor = false;
  for (size_t i = 0; i < tiers.size() && i < m.tensors.size(); ++i) {
    const TensorDesc& t = m.tensors[i];
    const bool on = tiers[i] == Tier::kGpu;
    if (t.role == TensorRole::kOutputNorm) g.head = on;
    if (t.role == TensorRole::kTokenEmbedding) g.embedding = on;
    if (t.layer >= 0 && t.layer < m.n_layer) {
      any_layer_tensor = true;
      auto& flags = model::is_moe_expert(t.role) ? experts_on : layer_on;
      if (!on) flags[static_cast<size_t>(t.layer)] = false;
    }
  }
  if (!any_layer_tensor) return g;
  while (g.layers < m.n_layer && layer_on[static_cast<size_t>(m.n_layer - 1 - g.layers)])
    ++g.layers;
  for (int L = m.n_layer - g.layers; L < m.n_layer; ++L)
    g.host_experts += experts_on[static_cast<size_t>(L)] ? 0 : 1;
  g.tied_head_copy = g.head && !g.embedding && tied_head(m);
  return g;
}

TierTraffic tier_traffic(const ModelTensors& m, const Plan& plan) {
  TierTraffic t;
  for (size_t i = 0; i < m.tensors.size() && i < plan.tiers.size(); ++i) {
    const TensorDesc& d = m.tensors[i];
    const auto read = static_cast<uint64_t>(d.access_per_token * static_cast<double>(d.bytes));
    const bool gpu_head_copy = plan.gpu.tied_head_copy && d.role == TensorRole::kTokenEmbedding;
    switch (gpu_head_copy ? Tier::kGpu : plan.tiers[i]) {
      case Tier::kGpu:
        t.gpu_bytes += read;
        break;
      case Tier::kRam:
        t.ram_bytes += read;
        break;
      case Tier::kStorage:
        t.storage_bytes += read;
        break;
    }
    // A prompt copies every layer tensor the GPU does not hold (StagedWeights).
    if (plan.gpu.any() && d.layer >= 0 && plan.tiers[i] != Tier::kGpu)
      t.prompt_bus_bytes += d.bytes;
  }
  if (plan.gpu.any()) {
    const bool cpu_stage = !plan.gpu.embedding;
    // A host-expert layer's rows go down and its n_used slot outputs come back up.
    const auto expert_rows = static_cast<uint64_t>(plan.gpu.host_experts) * 4 *
                             static_cast<uint64_t>(m.n_embd * (1 + m.n_expert_used));
    t.bus_bytes_per_token = 4 * static_cast<uint64_t>(m.n_vocab) +
                            (cpu_stage ? 4 * static_cast<uint64_t>(m.n_embd) : 0) + expert_rows;
  }
  return t;
}

TrafficBound traffic_bound(const TierTraffic& t, const TrafficRates& r) {
  TrafficBound b;
  bool known = true;
  const auto time = [&](uint64_t bytes, double bps) {
    if (bytes == 0) return 0.0;
    if (bps <= 0) {
      known = false;
      return 0.0;
    }
    return static_cast<double>(bytes) / bps;
  };
  b.gpu_s = time(t.gpu_bytes, r.gpu_bps);
  b.ram_s = time(t.ram_bytes + t.storage_bytes, r.ram_bps);
  b.storage_s = time(t.storage_bytes, r.storage_bps);
  b.bus_s = time(t.bus_bytes_per_token, r.bus_bps);
  if (!known) {
    b.limit = "unknown";
    return b;
  }
  b.seconds = std::max(b.storage_s, b.ram_s + b.bus_s + b.gpu_s);
  b.tok_s = b.seconds > 0 ? 1 / b.seconds : 0;
  const std::pair<double, const char*> terms[] = {
      {b.gpu_s, "gpu"}, {b.ram_s, "ram"}, {b.storage_s, "storage"}, {b.bus_s, "bus"}};
  b.limit = std::max_element(std::begin(terms), std::end(terms))->second;
  return b;
}

uint64_t Plan::bytes_on(const ModelTensors& m, Tier tier) const {
  uint64_t total = 0;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] == tier) total += m.tensors[i].bytes;
  }
  return total;
}

uint64_t process_overhead_bytes(const ModelTensors& m, const CostModel& c) {
  return c.process_base_bytes + c.process_slack_bytes +
         c.metadata_element_bytes * m.metadata_array_elements + c.token_bytes * m.n_tokens +
         c.merge_bytes * m.n_merges +
         c.vocab_sampling_bytes * static_cast<uint64_t>(std::max<int64_t>(m.n_vocab, 0));
}

bool evaluate(const ModelTensors& m, const HardwareProfile& p, const Budgets& b, const CostModel& c,
              Plan& plan) {
  const Limits lim = limits(p, b);
  const profiler::StorageProfile& st = p.storage;
  const size_t n_pipe = static_cast<size_t>(m.n_layer) + 1;
  MemoryPlan mem;
  mem.ram_limit = lim.ram;
  mem.gpu_limit = lim.gpu;
  mem.unified = lim.unified;
  mem.overhead_ram = process_overhead_bytes(m, c);
  mem.work_ram = work_bytes(m, b);

  LayerCosts lc{std::vector<double>(n_pipe, c.per_layer_overhead_s),
                std::vector<double>(n_pipe, 0.0), std::vector<double>(n_pipe, 0.0),
                std::vector<double>(n_pipe, 0.0)};
  // Only expert-streaming mode reads single experts through the cache (ExpertProvider); in
  // the other modes the streaming provider reads a streamed expert tensor whole, so it is
  // costed as a dense streamed tensor (all n_expert experts per token).
  const bool expert_mode = derive_mode(m, plan.tiers) == Mode::kExpertStreaming;
  std::vector<uint64_t> streamed_bytes(n_pipe, 0);
  std::vector<std::vector<const TensorDesc*>> streamed_tensors(n_pipe);  // dense-streamed, by layer
  std::vector<uint64_t> expert_bytes_layer(n_pipe, 0);  // one expert's gate+up+down
  std::vector<uint64_t> expert_slot_layer(n_pipe, 0);   // the same in an ExpertProvider slot
  std::vector<double> expert_compute_s(n_pipe, 0.0);    // the routed experts' compute
  uint64_t expert_total_bytes = 0, storage_bytes = 0;
  uint64_t experts_total = 0;
  bool any_gpu = false;
  std::vector<bool> kv_gpu(n_pipe, false);
  plan.gpu = gpu_split_of(m, plan.tiers);
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorDesc& t = m.tensors[i];
    Tier tier = plan.tiers[i];
    size_t L = static_cast<size_t>(pipeline_layer(m, t));
    // Streamed tensors compute where their slots live: GPU-visible memory on a unified
    // machine (the original's Metal rig), host RAM for the CPU otherwise.
    Tier computes_on =
        tier == Tier::kStorage ? (lim.unified && lim.has_gpu ? Tier::kGpu : Tier::kRam) : tier;
    // A tied head on a discrete GPU: the embedding stays in RAM and a copy multiplies there.
    if (plan.gpu.tied_head_copy && t.role == TensorRole::kTokenEmbedding) {
      computes_on = Tier::kGpu;
      mem.gpu_weights += t.bytes;
      any_gpu = true;
    }
    const double compute_s = tensor_compute_s(m, t, p, c, computes_on);
    lc.compute_s[L] += compute_s;
    if (model::is_moe_expert(t.role)) expert_compute_s[L] += compute_s;
    if (tier == Tier::kGpu) {
      any_gpu = true;
      mem.gpu_weights += t.bytes;
      if (model::is_attention(t.role) && t.layer >= 0) kv_gpu[L] = true;
    } else if (tier == Tier::kRam) {
      mem.ram_weights += t.bytes;
    } else if (expert_mode && model::is_moe_expert(t.role) && t.n_expert > 0) {
      const uint64_t slice = t.bytes / static_cast<uint64_t>(t.n_expert);
      expert_bytes_layer[L] += slice;
      expert_slot_layer[L] += align_up(slice) + kAlign;  // as ExpertProvider lays out a slot
      expert_total_bytes += t.bytes;
    } else {
      streamed_bytes[L] += t.bytes;
      streamed_tensors[L].push_back(&t);
    }
  }
  // KV cache: per layer, on the GPU when the layer's attention is there.
  uint64_t kv_layer = kv_bytes(m, b) / std::max(1, m.n_layer);
  for (size_t L = 0; L < static_cast<size_t>(m.n_layer); ++L)
    (kv_gpu[L] ? mem.kv_gpu : mem.kv_ram) += kv_layer;
  if (any_gpu) {
    mem.work_gpu = gpu_work_bytes(m, b);
    mem.overhead_gpu = c.gpu_context_bytes;
  }
  // A discrete GPU's split: the host layers' KV rows mirrored, their staging slot and the
  // prompt pass's own work buffers (split_overhead less the KV already counted).
  if (!lim.unified && plan.gpu.any() && plan.gpu.layers < m.n_layer) {
    const int first = m.n_layer - plan.gpu.layers;
    mem.kv_gpu += kv_layer * static_cast<uint64_t>(first);
    mem.work_gpu += split_overhead(m, b, layer_bytes(m), first) - kv_bytes(m, b);
  }
  // The expert split: the prompts' slot for one layer's experts, and per host-expert layer
  // and token the round trip (rows down, the handshake with the host thread, outputs up).
  if (!lim.unified && plan.gpu.host_experts > 0) {
    const std::vector<uint64_t> experts = layer_bytes(m, /*experts_only=*/true);
    mem.work_gpu += *std::max_element(experts.begin(), experts.end());
    const int first = m.n_layer - plan.gpu.layers;
    for (int L = first; L < first + plan.gpu.host_experts; ++L)
      lc.compute_s[static_cast<size_t>(L)] += c.host_expert_sync_s;
  }

  // Dense streaming pool: one slot per streamed layer in memory (the one computing and
  // `depth` being read), each big enough for the largest layer's streamed tensors.
  int n_streamed_layers = 0;
  uint64_t slot_bytes = 0, dense_streamed = 0;
  std::vector<uint64_t> read_sizes;
  for (size_t L = 0; L < n_pipe; ++L) {
    if (streamed_bytes[L] == 0) continue;
    ++n_streamed_layers;
    const LayerReads reads = layer_reads(streamed_tensors[L]);
    slot_bytes = std::max(slot_bytes, reads.slot_bytes);
    read_sizes.insert(read_sizes.end(), reads.sizes.begin(), reads.sizes.end());
    dense_streamed += streamed_bytes[L];
  }
  int depth = n_streamed_layers == 0
                  ? 0
                  : std::clamp(plan.prefetch_depth, 1, std::max(1, n_streamed_layers - 1));
  if (n_streamed_layers == 1) depth = 1;
  // The rate the pool's reads reach depends on the bytes it keeps queued (stream_io).
  StreamIo sio = stream_io(st, {}, 0, c.max_queue_depth);
  if (n_streamed_layers > 0) {
    const double layer = static_cast<double>(dense_streamed) / n_streamed_layers;
    sio = stream_io(st, read_sizes, (depth - 0.5) * layer, c.max_queue_depth);
  }
  for (size_t L = 0; L < n_pipe; ++L) {
    if (streamed_bytes[L] == 0) continue;
    storage_bytes += streamed_bytes[L];
    lc.read_s[L] = static_cast<double>(streamed_bytes[L]) / sio.bps;
  }
  plan.prefetch_depth = depth;
  plan.pool_slot_bytes = slot_bytes;
  plan.pool_slots =
      n_streamed_layers ? static_cast<uint32_t>(std::min(depth + 1, n_streamed_layers)) : 0;
  mem.pool = plan.pool_slot_bytes * plan.pool_slots;

  // Expert cache (expert-streaming): slots of the provider's layout (the largest layer's
  // three aligned slices), as many as fit in the RAM left over less a margin for what the
  // ledger does not see (allocator slack, I/O rings, thread stacks), at least two layers'
  // worth of routed experts.
  double hit = 1.0, misses_per_token = 0;
  // The resident loader reads neighbouring resident tensors as one 4 KiB-aligned run: up
  // to one block at each end of every run beyond their bytes (tensors are in file order).
  // Not a plan figure, but it must fit.
  uint64_t resident_slack = 0;
  for (size_t i = 0; i < plan.tiers.size(); ++i) {
    const bool starts_run =
        plan.tiers[i] == Tier::kRam && (i == 0 || plan.tiers[i - 1] != Tier::kRam);
    resident_slack += starts_run ? 2 * kAlign : 0;
  }
  if (expert_total_bytes > 0) {
    for (size_t L = 0; L < n_pipe; ++L)
      experts_total += expert_bytes_layer[L] > 0 ? static_cast<uint64_t>(m.n_expert) : 0;
    const uint64_t slot = *std::max_element(expert_slot_layer.begin(), expert_slot_layer.end());
    plan.expert_slot_bytes = slot;
    const uint64_t used = mem.ram_total() + resident_slack + expert_cache_margin(c, lim.ram);
    const uint64_t min_slots = 2 * static_cast<uint64_t>(std::max<int64_t>(m.n_expert_used, 1));
    uint64_t slots = used < lim.ram ? (lim.ram - used) / slot : 0;
    slots = std::min(std::max(slots, min_slots), experts_total);
    plan.expert_cache_experts = static_cast<uint32_t>(slots);
    mem.expert_cache = slots * slot;
    const std::vector<double> layer_hit =
        expected_layer_hits(m, expert_bytes_layer, slots, experts_total);
    const double lat = read_latency_s(st);
    double hit_sum = 0;
    int moe_layers = 0;
    for (size_t L = 0; L < n_pipe; ++L) {
      if (expert_bytes_layer[L] == 0) continue;
      // One token routes n_used experts; their reads start together at route() and each
      // expert computes as its bytes arrive, so the layer's expert compute hides reads.
      const double miss = 1 - layer_hit[L];
      const double miss_bytes = static_cast<double>(m.n_expert_used) * expert_bytes_layer[L] * miss;
      const double one_read = expert_bytes_layer[L] / st.seq_read_bps + lat;
      lc.demand_io_s[L] += static_cast<double>(m.n_expert_used) * miss * one_read;
      lc.demand_s[L] += expected_miss_stall(static_cast<int>(m.n_expert_used), miss, one_read,
                                            expert_compute_s[L]);
      storage_bytes += static_cast<uint64_t>(miss_bytes);
      misses_per_token += static_cast<double>(m.n_expert_used) * miss;
      hit_sum += layer_hit[L];
      ++moe_layers;
    }
    hit = moe_layers > 0 ? hit_sum / moe_layers : 1.0;
  } else {
    plan.expert_cache_experts = 0;
  }
  plan.memory = mem;

  Prediction& pr = plan.prediction;
  pr = Prediction{};
  pr.compute_s = std::accumulate(lc.compute_s.begin(), lc.compute_s.end(), 0.0);
  pr.io_demand_s = std::accumulate(lc.demand_io_s.begin(), lc.demand_io_s.end(), 0.0);
  pr.io_s = std::accumulate(lc.read_s.begin(), lc.read_s.end(), 0.0) + pr.io_demand_s;
  pr.seconds_per_token = simulate(lc, depth + 1);
  pr.tok_per_s = pr.seconds_per_token > 0 ? 1.0 / pr.seconds_per_token : 0;
  pr.storage_bytes_per_token = storage_bytes;
  pr.expert_hit_rate = hit;
  pr.expert_hit_rate_recorded = expert_total_bytes > 0 && has_recorded_routing(m);
  pr.expert_misses_per_token = misses_per_token;
  pr.storage_bound_tok_s =
      storage_bytes > 0 ? st.seq_read_bps / static_cast<double>(storage_bytes) : 0;
  pr.io_bound = pr.io_s > pr.compute_s;
  plan.mode = derive_mode(m, plan.tiers);
  pr.stream_read_bps = n_streamed_layers > 0 ? sio.bps : 0;
  plan.io_request_bytes = sio.request_bytes;
  plan.io_queue_depth = sio.queue_depth;
  plan.n_ctx = b.n_ctx;
  plan.n_seq = b.n_seq;
  bool ram_ok = mem.ram_total() + resident_slack <= lim.ram;
  bool gpu_ok = mem.gpu_total() <= (any_gpu ? lim.gpu : ~uint64_t{0});
  return ram_ok && gpu_ok;
}

namespace {

// Tiers with the given tensors streamed and the rest resident, split between GPU and RAM.
std::vector<Tier> with_streamed(const ModelTensors& m, const std::vector<bool>& streamed,
                                const Budgets& b, const CostModel& c, const Limits& lim) {
  std::vector<Tier> tiers(m.tensors.size(), Tier::kRam);
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (streamed[i]) tiers[i] = Tier::kStorage;
  }
  if (!lim.gpu_fixed.empty()) {
    for (size_t i = 0; i < tiers.size(); ++i) {
      if (lim.gpu_fixed[i]) tiers[i] = Tier::kGpu;
    }
    return tiers;
  }
  assign_gpu(m, b, c, lim, tiers);
  return tiers;
}

// Groups of one class: the tensors of that class in each pipeline layer, in layer order
// (a discrete GPU's tensors are in none: they never stream).
std::vector<std::vector<size_t>> class_groups(const ModelTensors& m, StreamClass cls,
                                              const Limits& lim) {
  std::map<int, std::vector<size_t>> by_layer;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    if (!lim.gpu_fixed.empty() && lim.gpu_fixed[i]) continue;
    if (stream_class(m.tensors[i]) == cls) by_layer[pipeline_layer(m, m.tensors[i])].push_back(i);
  }
  std::vector<std::vector<size_t>> out;
  for (auto& [layer, idx] : by_layer) out.push_back(idx);
  return out;
}

struct Candidate {
  bool found = false;
  Plan plan;
};

// Extra streaming must buy at least kMinGain: between near-equal plans the simpler one
// (fewer classes on storage, a purer mode) wins. The cost model is not more accurate
// than this, so the choice costs nothing measurable.
constexpr double kMinGain = 0.05;

struct Search {
  const ModelTensors& m;
  const HardwareProfile& p;
  const Budgets& b;
  const CostModel& c;
  const Limits& lim;
  int depth;

  // Evaluates `streamed`; true (and the plan in `out`) when it fits.
  bool attempt(const std::vector<bool>& streamed, Plan& out) const {
    out = Plan{};
    out.tiers = with_streamed(m, streamed, b, c, lim);
    out.prefetch_depth = depth;
    return evaluate(m, p, b, c, out);
  }

  // `base` plus k groups of `groups`, spread over the layers.
  static std::vector<bool> plus(std::vector<bool> base,
                                const std::vector<std::vector<size_t>>& groups, int k) {
    for (int g : spread(k, static_cast<int>(groups.size()))) {
      for (size_t i : groups[static_cast<size_t>(g)]) base[i] = true;
    }
    return base;
  }

  // The (dense FFN groups, attention groups) frontier on top of `base`: for each number of
  // FFN groups the fewest attention groups that fit (a count whose maximum does not fit
  // is skipped after one evaluation). Pure-FFN plans win unless a mixed one is kMinGain
  // faster.
  void frontier(const std::vector<bool>& base, Candidate& best) const {
    auto ffn = class_groups(m, StreamClass::kDenseFfn, lim);
    auto attn = class_groups(m, StreamClass::kAttention, lim);
    Candidate pure, mixed;
    int n2 = static_cast<int>(ffn.size()), n3 = static_cast<int>(attn.size());
    auto consider = [&](const std::vector<bool>& streamed, bool is_pure) {
      Plan plan;
      if (!attempt(streamed, plan)) return false;
      Candidate& slot = is_pure ? pure : mixed;
      if (!slot.found ||
          plan.prediction.seconds_per_token < slot.plan.prediction.seconds_per_token * (1 - 1e-9)) {
        slot.found = true;
        slot.plan = std::move(plan);
      }
      return true;
    };
    Plan probe;
    for (int k2 = 0; k2 <= n2; ++k2) {
      std::vector<bool> with_ffn = plus(base, ffn, k2);
      if (n3 > 0 && !attempt(plus(with_ffn, attn, n3), probe)) continue;
      for (int k3 = 0; k3 <= n3; ++k3) {
        if (consider(plus(with_ffn, attn, k3), k3 == 0)) break;
      }
      if (pure.found) break;  // more FFN streaming only adds reads
    }
    for (Candidate* cand : {&pure, &mixed}) {
      if (!cand->found) continue;
      double bar = best.found ? best.plan.prediction.seconds_per_token * (1 - kMinGain) : 1e300;
      if (cand->plan.prediction.seconds_per_token < bar) best = std::move(*cand);
    }
  }

  // The least streaming that fits at this depth: nothing; else every expert tensor (expert
  // streaming: the cache then holds any fraction of them); else the best dense frontier
  // with or without the expert tensors streamed; else everything streamable.
  Candidate run() const {
    std::vector<bool> none(m.tensors.size(), false);
    Candidate best;
    if (attempt(none, best.plan)) {
      best.found = true;
      return best;
    }
    auto experts = class_groups(m, StreamClass::kExperts, lim);
    if (!experts.empty()) {
      // Expert streaming whenever it fits: the cache takes whatever memory is left, which
      // serves any routing better than pinning whole layers, and the runtime's expert
      // provider reads single experts only in this mode.
      std::vector<bool> base = plus(none, experts, static_cast<int>(experts.size()));
      if (attempt(base, best.plan)) {
        best.found = true;
        return best;
      }
      // Expert tensors streamed whole with the dense frontier (full-streaming), or kept
      // resident while the dense frontier streams, whichever is faster.
      frontier(base, best);
    }
    frontier(none, best);
    if (best.found) return best;
    // The output head streamed too, on top of either base (its slot size makes it last).
    if (auto head = class_groups(m, StreamClass::kOutputHead, lim); !head.empty()) {
      const int n_head = static_cast<int>(head.size());
      if (!experts.empty())
        frontier(plus(plus(none, experts, static_cast<int>(experts.size())), head, n_head), best);
      frontier(plus(none, head, n_head), best);
      if (best.found) return best;
    }
    std::vector<bool> all(m.tensors.size(), false);
    for (size_t i = 0; i < all.size(); ++i)
      all[i] = stream_class(m.tensors[i]) != StreamClass::kNever;
    if (attempt(all, best.plan)) best.found = true;
    return best;
  }
};

std::string gpu_split_text(const ModelTensors& m, const GpuSplit& g) {
  if (!g.any())
    return "Nothing fits on the GPU beside its work buffers: every layer computes on the CPU.";
  std::string s = "The GPU computes ";
  if (g.layers == m.n_layer) {
    s += "every layer";
  } else {
    s += "layers " + std::to_string(m.n_layer - g.layers) + "-" + std::to_string(m.n_layer - 1) +
         " (" + std::to_string(g.layers) + " of " + std::to_string(m.n_layer) + ")";
  }
  s += g.head ? " and the output head" : "";
  if (g.host_experts > 0) {
    const int first = m.n_layer - g.layers;
    s += ", except the routed experts of layers " + std::to_string(first) + "-" +
         std::to_string(first + g.host_experts - 1) +
         ", which stay in host memory and compute on the CPU (each step copies those layers' "
         "rows down and their experts' outputs up)";
  }
  s += g.embedding ? ", the embedding too" : "";
  if (g.layers < m.n_layer) {
    s += "; the CPU computes the " + std::to_string(m.n_layer - g.layers) +
         " layers before them from RAM or storage, and each step copies the residual rows to the "
         "GPU";
  }
  if (g.tied_head_copy) s += "; the tied embedding is in RAM and on the GPU (for the head)";
  return s + ".";
}

void explain(const ModelTensors& m, const HardwareProfile& p, const Budgets& b, const CostModel& c,
             const Limits& lim, Plan& plan) {
  auto& e = plan.explanation;
  const MemoryPlan& mem = plan.memory;
  uint64_t reserve = b.reserve_bytes.value_or(p.memory.reserve_bytes);
  std::string limit_src = "RAM " + gib(p.memory.total_bytes) + " - reserve " + gib(reserve);
  if (p.memory.cgroup_limit_bytes &&
      *p.memory.cgroup_limit_bytes <=
          p.memory.total_bytes - std::min(reserve, p.memory.total_bytes)) {
    limit_src =
        "cgroup " + p.memory.cgroup_version + " memory limit " + gib(*p.memory.cgroup_limit_bytes);
  }
  if (b.ram_bytes && *b.ram_bytes == lim.ram) limit_src = "--ram-budget " + gib(*b.ram_bytes);
  e.push_back("Host memory limit " + gib(lim.ram) + ": " + limit_src + ".");
  if (lim.has_gpu) {
    e.push_back(
        "GPU " + p.gpus.front().name + ": " + gib(lim.gpu) + " usable" +
        (lim.unified ? " (unified memory: GPU bytes count against the host limit too)." : "."));
    if (!lim.unified) e.push_back(gpu_split_text(m, plan.gpu));
  } else {
    e.push_back("No GPU tier: tiers are RAM and storage.");
  }
  e.push_back("Fixed costs: KV cache " + gib(mem.kv_ram + mem.kv_gpu) + " (" +
              std::to_string(b.n_ctx) + " tokens" +
              (b.n_seq > 1 ? " x " + std::to_string(b.n_seq) + " sequences" : std::string()) +
              "), work buffers " + gib(mem.work_ram + mem.work_gpu) + ", runtime " +
              gib(mem.overhead_ram + mem.overhead_gpu) + ".");
  uint64_t total = m.total_bytes();
  uint64_t on_storage = plan.bytes_on(m, Tier::kStorage);
  if (on_storage == 0) {
    e.push_back("Model " + gib(total) + " fits: every tensor resident, no storage reads.");
  } else {
    e.push_back(
        "Model " + gib(total) + " does not fit: " + gib(on_storage) + " stays on storage (" +
        mode_name(plan.mode) +
        "), chosen as the tensors that add the least storage traffic per byte "
        "of memory freed (MoE experts, then dense FFN, then attention and the output head).");
  }
  if (plan.pool_slots > 0) {
    e.push_back(
        "Pool: " + std::to_string(plan.pool_slots) + " layer slots of " +
        gib(plan.pool_slot_bytes) + " = " + gib(mem.pool) + "; prefetch " +
        std::to_string(plan.prefetch_depth) +
        " layers ahead (the depth with the lowest predicted time: each extra layer of prefetch "
        "costs its slots in memory, i.e. more streamed bytes).");
  }
  if (plan.mode == Mode::kExpertStreaming) {
    e.push_back(
        "Expert streaming: every non-expert tensor resident (" +
        gib(mem.ram_weights + mem.gpu_weights) + "); the stacked expert tensors (" +
        gib(on_storage) +
        ") stay on storage and only the experts the "
        "routers select are read, into an expert cache that takes the host memory left after the "
        "fixed costs, less a margin of " +
        gib(expert_cache_margin(c, lim.ram)) + ".");
    e.push_back("Expert cache: " + std::to_string(plan.expert_cache_experts) + " experts of " +
                gib(plan.expert_slot_bytes) + " = " + gib(mem.expert_cache) + "; " +
                (plan.prediction.expert_hit_rate_recorded
                     ? "hit rate from the routing recorded in earlier runs (the most often routed "
                       "experts cached) "
                     : "uniform-routing hit rate ") +
                fmt("%.1f%%", 100 * plan.prediction.expert_hit_rate) +
                (plan.prediction.expert_hit_rate_recorded
                     ? ""
                     : " (real routing is more local: a lower bound)") +
                "; expected misses " + fmt("%.1f", plan.prediction.expert_misses_per_token) +
                " experts per token.");
  } else if (on_storage > 0 && m.n_expert > 0) {
    e.push_back(
        "Expert streaming does not fit (the non-expert tensors, fixed costs and a cache of two "
        "layers' routed experts exceed the limit): expert tensors on storage are read whole.");
  }
  const Prediction& pr = plan.prediction;
  std::string bound = pr.io_bound ? "storage-bound" : "compute-bound";
  e.push_back(
      "Predicted " + fmt("%.2f", pr.tok_per_s) + " tok/s (" + bound + ": compute " +
      fmt("%.3f", pr.compute_s) + " s/token, storage reads " + fmt("%.3f", pr.io_s) + " s/token, " +
      gib(pr.storage_bytes_per_token) + " read per token at " +
      fmt("%.2f", (pr.stream_read_bps > 0 ? pr.stream_read_bps : p.storage.seq_read_bps) / 1e9) +
      " GB/s" +
      (pr.stream_read_bps > 0
           ? " (" + fmt("%.2f", pr.stream_read_bps / p.storage.seq_read_bps) +
                 " x the disk's best " + fmt("%.2f", p.storage.seq_read_bps / 1e9) +
                 " GB/s: the profile's grid at the pool's bytes in "
                 "flight, reads of " +
                 gib(plan.io_request_bytes) + " x" + std::to_string(plan.io_queue_depth) + ")"
           : std::string()) +
      ").");
  e.push_back(
      "Peak memory: host " + gib(mem.ram_total()) + " of " + gib(lim.ram) +
      (lim.has_gpu ? ", GPU " + gib(mem.gpu_total()) + " of " + gib(lim.gpu) : std::string()) +
      ".");
}

}  // namespace

namespace {

Result<Plan> layers_in_order(const ModelTensors& m, const HardwareProfile& p, const Budgets& b,
                             const CostModel& c, const Limits& lim);

// place() within the limits (and the GPU's tensors) of `lim`.
Result<Plan> place_within(const ModelTensors& m, const HardwareProfile& p, const Budgets& b,
                          const CostModel& c, const Limits& lim) {
  Candidate best;
  int worse = 0;
  for (int depth = 1; depth <= c.max_prefetch_depth; ++depth) {
    Candidate cand = Search{m, p, b, c, lim, depth}.run();
    if (!cand.found) continue;
    // Strictly better only: ties keep the shallower depth (less memory, same speed).
    if (!best.found || cand.plan.prediction.seconds_per_token <
                           best.plan.prediction.seconds_per_token * (1 - 1e-9)) {
      best = std::move(cand);
      worse = 0;
    } else if (++worse == 2) {
      break;  // deeper prefetch only costs more memory from here on
    }
    if (best.plan.pool_slots == 0) break;  // nothing dense streams: depth is irrelevant
  }
  if (!best.found) {
    Plan probe;
    probe.tiers.assign(m.tensors.size(), Tier::kStorage);
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      if (stream_class(m.tensors[i]) == StreamClass::kNever) probe.tiers[i] = Tier::kRam;
    }
    probe.prefetch_depth = 1;
    evaluate(m, p, b, c, probe);
    return resource_exhausted("no placement fits: even streaming every large tensor needs " +
                              gib(probe.memory.ram_total()) + " of host memory (limit " +
                              gib(lim.ram) + ": KV cache " + gib(probe.memory.kv_ram) +
                              ", work buffers " + gib(probe.memory.work_ram) + ", pool " +
                              gib(probe.memory.pool) + "); lower --context or raise the budget");
  }
  // The layer-prefix placement (whole layers resident in order) is a candidate too: the
  // class order above is within one group of the best for dense models, but for MoE
  // models a whole resident layer can beat spreading the cache (docs/PLANNER.md).
  // Not for expert streaming: there the cache already holds what whole layers would.
  auto prefix = best.plan.mode == Mode::kExpertStreaming
                    ? Result<Plan>(resource_exhausted("expert streaming"))
                    : layers_in_order(m, p, b, c, lim);
  bool prefix_won = prefix.is_ok() && prefix->prediction.seconds_per_token <
                                          best.plan.prediction.seconds_per_token * (1 - 1e-9);
  if (prefix_won) best.plan = std::move(prefix).value();
  explain(m, p, b, c, lim, best.plan);
  if (prefix_won) {
    best.plan.explanation.push_back(
        "Chosen over the class-ordered placement: keeping whole layers resident in "
        "order predicts a faster token here.");
  }
  return std::move(best.plan);
}

Result<Plan> layers_in_order(const ModelTensors& m, const HardwareProfile& p, const Budgets& b,
                             const CostModel& c, const Limits& lim) {
  Plan best;
  bool found = false;
  for (int depth = 1; depth <= c.max_prefetch_depth; ++depth) {
    for (int resident = m.n_layer; resident >= 0; --resident) {
      std::vector<bool> streamed(m.tensors.size(), false);
      for (size_t i = 0; i < m.tensors.size(); ++i) {
        const TensorDesc& t = m.tensors[i];
        streamed[i] = t.layer >= resident && stream_class(t) != StreamClass::kNever;
      }
      Plan plan;
      plan.tiers = with_streamed(m, streamed, b, c, lim);
      plan.prefetch_depth = depth;
      if (!evaluate(m, p, b, c, plan)) continue;
      if (!found || plan.prediction.seconds_per_token < best.prediction.seconds_per_token)
        best = plan;
      found = true;
      break;
    }
  }
  if (!found) return resource_exhausted("layers-in-order placement does not fit");
  return best;
}

}  // namespace

Result<Plan> place(const ModelTensors& m, const HardwareProfile& p, const Budgets& b,
                   const CostModel& c) {
  if (m.tensors.empty() || m.n_layer <= 0)
    return invalid_argument("model has no tensors or layers to place");
  if (p.storage.seq_read_bps <= 0) return invalid_argument("profile has no storage read bandwidth");
  HYPURA_RETURN_IF_ERROR(check_context_sizes(m, b));
  Result<Plan> plan = place_within(m, p, b, c, limits_for(m, p, b, c));
  // The host thread computes an expert split's host experts from RAM between the GPU's
  // steps; experts read from storage there are not supported yet, so such a plan gives
  // way to whole layers on the GPU.
  if (plan.is_ok() && plan->gpu.host_experts > 0 && plan->mode != Mode::kFullResident)
    plan = place_within(m, p, b, c, limits_for(m, p, b, c, /*expert_split=*/false));
  return plan;
}

Result<Plan> place_layers_in_order(const ModelTensors& m, const HardwareProfile& p,
                                   const Budgets& b, const CostModel& c) {
  HYPURA_RETURN_IF_ERROR(check_context_sizes(m, b));
  return layers_in_order(m, p, b, c, limits_for(m, p, b, c));
}

Prediction predict_mmap(const ModelTensors& m, const HardwareProfile& p, const Budgets& b,
                        const CostModel& c) {
  const Limits lim = limits(p, b);
  Plan resident;
  resident.tiers.assign(m.tensors.size(), Tier::kRam);
  bool fits = evaluate(m, p, b, c, resident);
  if (fits) return resident.prediction;
  // The page cache holds less than one token's working set: a cyclic scan through an LRU
  // cache smaller than it misses every time, and each fault waits for its read.
  Prediction pr = resident.prediction;
  double touched = static_cast<double>(m.bytes_read_per_token());
  pr.storage_bytes_per_token = static_cast<uint64_t>(touched);
  pr.io_s = touched / p.storage.seq_read_bps;
  pr.io_demand_s = pr.io_s;
  pr.seconds_per_token = pr.compute_s + pr.io_s;
  pr.tok_per_s = 1.0 / pr.seconds_per_token;
  pr.io_bound = true;
  (void)lim;
  return pr;
}

}  // namespace hypura::scheduler
