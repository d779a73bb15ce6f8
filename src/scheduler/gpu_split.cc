// The GPU's share of a plan. A discrete GPU's tensors are chosen before the RAM/storage
// search: a suffix of whole layers and the output head, or for a MoE model the expert
// split; on a unified GPU assign_gpu splits the resident tensors instead.
// docs/PLANNER.md and docs/GPU.md derive both.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "scheduler/planner_internal.h"

namespace hypura::scheduler {
namespace detail {
namespace {

using model::TensorRole;

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

// The first layer of the longest suffix of at most `cap` layers whose weights fit beside
// `fixed` and the split's own costs; n_layer when none does.
int first_suffix_layer(const ModelTensors& m, const Budgets& b, const std::vector<uint64_t>& bytes,
                       uint64_t fixed, uint64_t gpu_limit, int cap) {
  int first = m.n_layer;
  uint64_t held = 0;  // the weights of layers first..
  const int lowest = m.n_layer - cap;
  while (first > lowest) {
    const uint64_t with_next = held + bytes[static_cast<size_t>(first - 1)];
    if (fixed + split_overhead(m, b, bytes, first - 1) + with_next > gpu_limit) break;
    held = with_next;
    --first;
  }
  return first;
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
  if (cap == m.n_layer && fixed + all_layers + kv_bytes(m, b) <= lim.gpu)
    return gpu_tensors_from(m, 0, lim.gpu - fixed - all_layers - kv_bytes(m, b));
  const int first = first_suffix_layer(m, b, bytes, fixed, lim.gpu, cap);
  if (first == m.n_layer && fixed + split_overhead(m, b, bytes, first) > lim.gpu)
    return std::vector<bool>(m.tensors.size(), false);  // not even the head
  return gpu_tensors_from(m, first, 0);
}

// A MoE model that does not fit whole: the expert split (llama.cpp's --n-cpu-moe, chosen
// by the budget). A token reads all of every layer's attention, router and norms but only
// n_used of n_expert experts, so the GPU takes everything but the routed experts (every
// layer's attention and KV cache, the head, the embedding when it fits), then the experts
// of whole layers from the last one down while they fit; the other layers' experts stay
// in RAM and the CPU computes them (HostExperts; place() falls back to whole layers when
// they would have to stream from storage). Prompts copy the host experts of one layer at
// a time into a slot over the bus (StagedWeights), which the GPU holds too. Empty when
// even the part without experts does not fit.
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

}  // namespace

bool tied_head(const ModelTensors& m) {
  const TensorDesc* h = head_matrix(m);
  return h != nullptr && h->role == TensorRole::kTokenEmbedding;
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

Limits limits_for(const ModelTensors& m, const profiler::HardwareProfile& p, const Budgets& b,
                  const CostModel& c, bool expert_split) {
  Limits l = limits(p, b);
  if (l.has_gpu && !l.unified) l.gpu_fixed = gpu_placement(m, b, c, l, expert_split);
  return l;
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

}  // namespace detail

GpuSplit gpu_split_of(const ModelTensors& m, const std::vector<Tier>& tiers) {
  GpuSplit g;
  // Per layer: everything but the routed experts on the GPU; the experts too.
  std::vector<bool> layer_on(static_cast<size_t>(std::max(0, m.n_layer)), true);
  std::vector<bool> experts_on(layer_on.size(), true);
  bool any_layer_tensor = false;
  for (size_t i = 0; i < tiers.size() && i < m.tensors.size(); ++i) {
    const TensorDesc& t = m.tensors[i];
    const bool on = tiers[i] == Tier::kGpu;
    if (t.role == model::TensorRole::kOutputNorm) g.head = on;
    if (t.role == model::TensorRole::kTokenEmbedding) g.embedding = on;
    if (t.layer >= 0 && t.layer < m.n_layer) {
      any_layer_tensor = true;
      auto& flags = model::is_moe_expert(t.role) ? experts_on : layer_on;
      if (!on) flags[static_cast<size_t>(t.layer)] = false;
    }
  }
  if (!any_layer_tensor) return g;
  while (g.layers < m.n_layer && layer_on[static_cast<size_t>(m.n_layer - 1 - g.layers)])
    ++g.layers;
  // The span up to the last layer whose experts stay on the host: leading dense layers
  // (no experts) inside it count, as the runtime takes the first host_experts layers.
  for (int L = m.n_layer - g.layers; L < m.n_layer; ++L) {
    if (!experts_on[static_cast<size_t>(L)]) g.host_experts = L - (m.n_layer - g.layers) + 1;
  }
  g.tied_head_copy = g.head && !g.embedding && detail::tied_head(m);
  return g;
}

}  // namespace hypura::scheduler
