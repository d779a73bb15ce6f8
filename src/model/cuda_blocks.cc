#include "model/cuda_blocks.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "quant/quant.h"

#if HYPURA_HAVE_CUDA
#include "compute/cuda/attention.h"
#include "compute/cuda/binary.h"
#include "compute/cuda/dequant.h"
#include "compute/cuda/device.h"
#include "compute/cuda/fused.h"
#include "compute/cuda/gemm.h"
#include "compute/cuda/host_signal.h"
#include "compute/cuda/matvec.h"
#include "compute/cuda/moe.h"
#include "compute/cuda/norm.h"
#include "compute/cuda/quantize.h"
#include "compute/cuda/rope.h"
#include "compute/cuda/softmax.h"
#include "compute/cuda/strided.h"
#include "compute/cuda/unary.h"
#endif

namespace hypura::model {
#if HYPURA_HAVE_CUDA  // what the device code and its size estimate share
namespace {

// Logit rows computed per output product when every row's logits are wanted.
constexpr int64_t kLogitRows = 32;
// The most sequences a decode step may hold and still be a CUDA graph (their logits are
// staged in pinned memory, which a graph's copies need); their attention is one launch.
constexpr int64_t kGraphSeqs = 16;
// Graphs kept (one per set of KV caches and context bucket): a server's changing batches
// would otherwise accumulate them; the oldest goes first.
constexpr size_t kMaxGraphs = 64;
// Weight elements dequantized to F16 at a time for a prefill product (at most 128 MiB).
constexpr int64_t kMaxTileElems = int64_t{64} << 20;

// The sizes everything is carved from: shared by the estimate and the allocation.
struct Sizes {
  int64_t max_batch = 0, ff = 0, max_cols = 0, small_rows = 0, tile_elems = 0, k = 0;
  uint64_t largest_weight = 0;
};

Sizes sizes_for(const HParams& hp, const gguf::GgufFile& file, int64_t max_batch) {
  Sizes s;
  s.max_batch = max_batch;
  s.ff = std::max({hp.n_ff, hp.n_ff_expert, hp.n_ff_shexp()});
  s.k = std::max<int64_t>(hp.n_expert_used, 1);
  s.max_cols = std::max({hp.n_embd, s.ff, hp.n_head * hp.head_dim_v});
  // Quantized activations: a small batch's rows, or its (token, slot) pairs.
  s.small_rows = kCudaSmallBatch * s.k;
  int64_t largest = 0;
  for (const auto& t : file.tensors()) {
    if (t.ne.size() >= 2) largest = std::max(largest, t.ne[0] * t.ne[1]);
  }
  s.tile_elems = std::min(largest, kMaxTileElems);
  return s;
}

// Activation values of a prompt's MoE products: every (token, slot) row at once.
int64_t pair_elems(const HParams& hp, const Sizes& s) {
  return hp.n_expert > 0 ? s.max_batch * s.k * std::max(hp.n_embd, hp.n_ff_expert) : 0;
}

}  // namespace
#endif

Status cuda_supports(const HParams& hp, const gguf::GgufFile& file) {
#if HYPURA_HAVE_CUDA
  // Multi-head latent attention runs as MQA over the latent cache (attention.h's latent form).
  const bool latent = hp.is_mla();
  const int64_t max_k = latent ? compute::cuda::kAttnMaxLatentDim : compute::cuda::kAttnMaxHeadDim;
  const int64_t max_v = latent ? compute::cuda::kAttnMaxLatentDimV : compute::cuda::kAttnMaxHeadDim;
  const auto dims_ok = [](int64_t d, int64_t most) { return d > 0 && d % 8 == 0 && d <= most; };
  if (!dims_ok(hp.head_dim, max_k) || !dims_ok(hp.head_dim_v, max_v) ||
      (latent && hp.n_head_kv != 1)) {
    return unsupported("the GPU attention needs head sizes that are multiples of 8 up to " +
                       std::to_string(max_k) + " (keys) and " + std::to_string(max_v) +
                       " (values) (model: " + std::to_string(hp.head_dim) + ", " +
                       std::to_string(hp.head_dim_v) + ")");
  }
  if (hp.n_expert > compute::cuda::kRouteMaxExperts) {
    return unsupported("the GPU routing kernel takes at most " +
                       std::to_string(compute::cuda::kRouteMaxExperts) +
                       " experts (model: " + std::to_string(hp.n_expert) + ")");
  }
  for (const auto& t : file.tensors()) {
    if (!compute::cuda::matvec_supported(t.type)) {
      return unsupported("tensor '" + t.name + "' is " + gguf::type_name(t.type) +
                         ", which the GPU kernels do not multiply");
    }
  }
  return Status::ok();
#else
  return unsupported("this build has no CUDA backend (HYPURA_CUDA)");
#endif
}

#if HYPURA_HAVE_CUDA
compute::cuda::RouteOptions cuda_route_options(const HParams& hp, const float* logit_bias,
                                               const float* select_bias) {
  namespace cuda = compute::cuda;
  cuda::RouteOptions o;
  switch (hp.expert_gating) {
    case ExpertGating::kSoftmax:
      o.gating = cuda::RouteGating::kSoftmax;
      break;
    case ExpertGating::kSigmoid:
      o.gating = cuda::RouteGating::kSigmoid;
      break;
    case ExpertGating::kSoftmaxWeight:
      o.gating = cuda::RouteGating::kSoftmaxOfK;
      break;
  }
  o.logit_bias = logit_bias;
  o.select_bias = select_bias;
  o.n_groups = static_cast<int>(hp.n_expert_groups);
  o.n_group_used = static_cast<int>(hp.n_group_used);
  o.norm = hp.expert_weights_norm;
  o.scale = hp.expert_weights_scale;
  return o;
}

namespace {

namespace cuda = compute::cuda;
static_assert(kGraphSeqs == cuda::kAttnMaxSeqs);

// Keys per sequence up to which a decode step's sequences attend in one launch: the
// scratch holds every sequence's partials at this length (or one sequence's at n_ctx), so
// long contexts do not cost 16 times one sequence's scratch.
constexpr int64_t kStepAttentionKeys = 4096;

// Decode attention's partials: one sequence at n_ctx keys, or every sequence of a step at
// kStepAttentionKeys.
size_t attention_scratch_bytes(const HParams& hp, int64_t n_ctx) {
  const auto bytes = [&](int64_t n_kv) {
    return cuda::attention_scratch_bytes(hp.n_head, hp.n_head_kv, hp.head_dim_v, n_kv);
  };
  return std::max(bytes(n_ctx),
                  static_cast<size_t>(kGraphSeqs) * bytes(std::min(n_ctx, kStepAttentionKeys)));
}

// A device F32 vector's elements (null for an absent tensor).
const float* as_floats(const WeightView& w) {
  return static_cast<const float*>(w.data);
}
using cuda::align256;

// No activation format (CudaBlocks::activations): nothing quantized yet.
constexpr gguf::GgmlType kNothingCached = gguf::GgmlType::I64;

// The 8-bit format a weight type's activations are rounded to, if any.
bool act_format(gguf::GgmlType weight_type, cuda::ActFormat* format) {
  switch (quant::activation_type(weight_type)) {
    case gguf::GgmlType::Q8_0:
      *format = cuda::ActFormat::kQ8_0;
      return true;
    case gguf::GgmlType::Q8_1:
      *format = cuda::ActFormat::kQ8_1;
      return true;
    case gguf::GgmlType::Q8_K:
      *format = cuda::ActFormat::kQ8_K;
      return true;
    default:
      return false;
  }
}

// Offsets of the row buffers inside one device allocation.
struct Layout {
  size_t x, cur, tmp, q, k, v, attn, ff_gate, ff_up, logits;
  size_t probs, weights, slot_out, expert_in, expert_out, pair_gate, pair_up, selected, pairs,
      shared, step;
  size_t mla_lora, mla_heads, mla_nope;
  size_t total;
};

Layout layout_for(const HParams& hp, const Sizes& s) {
  Layout l{};
  size_t at = 0;
  const auto take = [&](size_t bytes) {
    const size_t off = at;
    at += align256(bytes);
    return off;
  };
  const auto rows = [&](int64_t n, int64_t width) { return static_cast<size_t>(n * width) * 4; };
  const int64_t b = s.max_batch;
  l.x = take(rows(b, hp.n_embd));
  l.cur = take(rows(b, hp.n_embd));
  l.tmp = take(rows(b, hp.n_embd));
  l.q = take(rows(b, hp.q_width()));
  l.k = take(rows(b, hp.k_width()));
  l.v = take(rows(b, hp.v_width()));
  l.attn = take(rows(b, hp.n_head * hp.head_dim_v));
  const int64_t ff_rows = std::max(b, s.small_rows);
  l.ff_gate = take(rows(ff_rows, s.ff));
  l.ff_up = take(rows(ff_rows, s.ff));
  l.logits = take(rows(kLogitRows, hp.n_vocab));
  if (hp.n_expert > 0) {
    l.probs = take(rows(b, hp.n_expert));
    l.weights = take(rows(b, s.k));
    l.slot_out = take(rows(b * s.k, hp.n_embd));
    // A prompt's (token, slot) rows grouped by expert (CudaBlocks::moe_batch).
    l.expert_in = take(rows(b * s.k, hp.n_embd));
    l.expert_out = take(rows(b * s.k, hp.n_embd));
    l.pair_gate = take(rows(b * s.k, hp.n_ff_expert));
    l.pair_up = take(rows(b * s.k, hp.n_ff_expert));
    l.selected = take(rows(b, s.k));
    l.pairs = take(rows(b, 2 * s.k));  // the pairs grouped by expert, then their experts
    if (hp.n_expert_shared > 0) l.shared = take(rows(b, hp.n_embd));
  }
  if (hp.is_mla()) {
    l.mla_lora = take(rows(b, hp.q_lora_rank));
    l.mla_heads = take(rows(b, hp.n_head * std::max(hp.head_dim_mla, hp.head_dim_v_mla)));
    // The (token, head) rows' q_nope packed (CudaBlocks::head_products).
    l.mla_nope = take(rows(b, hp.n_head * hp.qk_nope()));
  }
  l.step = take(static_cast<size_t>(3 * b) * 4);  // token ids, positions, cache slots
  l.total = at;
  return l;
}

class CudaBlocks final : public Blocks {
 public:
  CudaBlocks(const HParams& hp, const WeightMap& weights, WeightProvider& provider,
             int64_t max_batch, int64_t n_ctx, HostExpertLayers host, bool graphs)
      : Blocks(hp, weights, provider, max_batch, n_ctx), host_(host), use_graphs_(graphs) {}

  Status init(const gguf::GgufFile& file);

  bool on_device() const override { return true; }
  void embed(const WeightView& table, const int32_t* tokens) override;
  void continue_from(const float* host_x) override;
  void norm(const float* in, const WeightView& w, float* out) override;
  void linear(const WeightView& w, const float* in, float* out) override {
    if (replaying()) return;
    flush_norm();
    if (n_tokens_ <= kCudaSmallBatch) {
      defer_product(out,
                    [this, w, in, out](float* add_to) { matmul(w, in, n_tokens_, out, add_to); });
      return;
    }
    matmul(w, in, n_tokens_, out);
  }
  void project_qkv(const AttnViews& a, const float* in) override;
  void add_bias(float* rows, const WeightView& b) override {
    if (replaying()) return;
    flush_norm();
    cuda::add_rows(rows, floats(b), n_tokens_, b.n_cols, s());
  }
  void head_norm(float* rows, int64_t n_heads, const WeightView& w) override {
    if (replaying()) return;
    flush_norm();
    cuda::rms_norm(rows, floats(w), n_tokens_ * n_heads, w.n_cols, hp_.rms_eps, rows, s());
  }
  void rope(float* rows, int64_t n_heads, float freq_base, float freq_scale) override;
  void rope_qk(float freq_base, float freq_scale) override;
  void mla_kv(const WeightView& kv_norm) override;
  void mla_absorb_q(const float* q_heads, const WeightView& wk_b) override;
  void mla_values(const WeightView& wv_b, float* out) override;
  void scale(float* rows, int64_t width, float sc) override {
    if (replaying()) return;
    flush_norm();
    cuda::scale(rows, sc, n_tokens_ * width, s());
  }
  void residual(float* x, const float* y) override;
  using Blocks::attention;
  void attention(int64_t il, bool swa, float kq_scale, const WeightView& sinks) override;
  void attend_seq(int64_t il, const SeqRows& seq, bool swa, float kq_scale);
  // The fields both attention kernels' arguments take alike; MLA reads values from keys.
  template <class Args>
  void attention_shape(Args& a, const uint16_t* kc, const uint16_t* vc, float kq_scale) const {
    const bool latent = hp_.is_mla();
    a.k = kc;
    a.v = vc;
    a.n_head = hp_.n_head;
    a.n_head_kv = hp_.n_head_kv;
    a.head_dim = hp_.head_dim;
    a.head_dim_v = hp_.head_dim_v;
    a.k_stride = hp_.k_width();
    a.v_stride = latent ? hp_.k_width() : hp_.v_width();
    a.kq_scale = kq_scale;
    a.sinks = sinks_;
  }
  const float* sinks_ = nullptr;  // the current attention()'s sink logits (device), or null
  // The router (bias, gating) over lay_.probs' logits: lay_.selected and lay_.weights.
  void route(const FfnViews& w);
  void dense_ffn(const FfnViews& w, FfnAct act, const float* in, float* out) override;
  // out = down(act(gate(in)) * up(in)); defer: a small batch's down product waits for the
  // residual that follows (PendingProduct), else it is launched now.
  void gated_ffn(const WeightView& gate, const WeightView& up, const WeightView& down, FfnAct act,
                 const float* in, float* out, bool defer);
  // The shared expert's output (lay_.shared) of in, or null when the layer has none.
  const float* shared_expert(const FfnViews& w, const float* in);
  Status moe_ffn(int64_t il, const FfnViews& w, const float* in, float* out) override;
  Status finish(const WeightView& output, float* logits, float* hidden) override;

 private:
  cuda::StreamHandle s() const { return stream_.handle(); }
  static const float* floats(const WeightView& w) { return static_cast<const float*>(w.data); }
  float* at(size_t offset) const { return reinterpret_cast<float*>(base() + offset); }
  int32_t* ints(size_t offset) const { return reinterpret_cast<int32_t*>(base() + offset); }
  uint8_t* base() const { return static_cast<uint8_t*>(rows_.data()); }
  const int32_t* positions() const { return ints(lay_.step) + max_batch_; }
  // Each row's cache slot: its position, except in a draft tree (model/seq_rows.h).
  const int32_t* slots() const { return ints(lay_.step) + 2 * max_batch_; }
  static bool is_tree(const SeqRows& seq) { return seq.tree_parent != nullptr; }
  void fail(const Status& st) {
    if (error_.is_ok() && !st.is_ok()) error_ = st;
  }
  // Decode steps (one token of each of up to kGraphSeqs sequences, their last rows'
  // logits only) are CUDA graphs: the first step of a (KV caches, context bucket) captures
  // what the ops queue, later ones replay it and the ops return at once. What differs
  // between steps is read on the device: the token ids and positions (the step copy, a
  // node of the graph), attention's visible keys (from each position, launched for the
  // bucket's keys: the longest sequence's).
  enum class Mode { kEager, kCapture, kReplay };
  bool replaying() const { return mode_ == Mode::kReplay; }
  int64_t bucket_for(int64_t n_keys) const {
    int64_t b = 256;
    while (b < n_keys) b *= 2;
    return std::min(b, n_ctx_);
  }
  void start_step();
  void stage_step(const int32_t* tokens);
  cuda::RopeParams rope_params(float freq_base, float freq_scale) const;
  // Quantized activations of rows `in` for weights of `type`: `cached` when it already
  // holds them in that format (products sharing an input round it once), else a new
  // quantization (queued after the products reading the old one: the same stream).
  cuda::ActQ8 activations(gguf::GgmlType type, const float* in, int64_t n_cols, int64_t n,
                          gguf::GgmlType* cached_type, cuda::ActQ8* cached);
  void matvec_rows(const WeightView& w, const cuda::ActQ8& act, int64_t n, float* out,
                   float* add_to = nullptr);
  // Products of ws[i] on `in` for i < n, a small batch; `in` may be the pending norm's
  // output, which is then computed and quantized in one launch.
  void shared_input(const WeightView* const* ws, float* const* outs, int n, const float* in);
  // A small batch's RMS norm waits for the next op: when that op's products quantize the
  // norm's output, one kernel does both (fused.h); any other op computes it first.
  struct PendingNorm {
    const float* in = nullptr;  // null: none pending
    const float* w = nullptr;
    int64_t width = 0;
    float* out = nullptr;
  };
  // A small batch's last product into `out` (the attention output's, the FFN's down, the
  // experts' slot sum) waits for the next op too: when that op is residual(x, out), the
  // product's launch also adds it to x (the same float addition; one launch fewer), else
  // it is launched as it was.
  struct PendingProduct {
    const float* out = nullptr;  // null: none pending
    std::function<void(float* add_to)> launch;
  };
  void defer_product(const float* out, std::function<void(float* add_to)> launch) {
    product_ = {out, std::move(launch)};
  }
  // A captured decode step's RoPE of q and k waits for its attention, which rotates them
  // and stores the step's keys and values in one launch; any other op launches it first.
  struct PendingRope {
    bool pending = false;
    float freq_base = 0, freq_scale = 0;
  };
  void attend_step(int64_t il, bool swa, float kq_scale, const PendingRope& rope);
  void launch_rope_qk(float freq_base, float freq_scale);
  // Queues what waits (the pending product, then the pending norm: at most one of the two
  // is pending at a time, as every op starts here; then the pending RoPE).
  void flush_norm();
  // out (n, w.n_rows) = in (n, w.n_cols) W^T: per-row matvecs or the matrix product;
  // add_to (small batches only): also added to these rows.
  void matmul(const WeightView& w, const float* in, int64_t n, float* out, float* add_to = nullptr);
  Status moe_small(const FfnViews& w, const WeightView (&e)[3], const float* in,
                   const cuda::ActQ8* act, float* slot_out);
  Status moe_batch(const FfnViews& w, int64_t il, const float* in, float* out);
  Result<bool> experts_stacked(const FfnViews& w, int64_t il);  // sets stacked_ when true
  Status moe_batch_stacked(const FfnViews& w, const float* in, float* out);
  // out = the slot outputs summed by the routing weights, plus shared (or null) rows.
  void combine_slots(float* out, const float* shared);
  bool experts_on_host(int64_t il) const {
    return host_.experts != nullptr && il < host_.n_layers && n_tokens_ < host_.max_rows;
  }
  // The experts of a HostExpertLayers layer (cuda_blocks.h): the rows and the selection
  // down, a handshake with the host thread (host_signal.h), the CPU's slot outputs up, in
  // slot_out. The host thread serves the layer when it reaches serve_host_calls().
  // The shared expert's output (or null) is computed between the handshake's two halves,
  // while the CPU computes the routed experts.
  const float* moe_on_host(int64_t il, const FfnViews& w, const float* in, float* slot_out);
  // One layer's experts for a batch of n_rows rows, computed by the host thread.
  struct HostCall {
    int64_t il, n_rows;
    ExpertTensors tensors;
  };
  // Serves host calls in order: waits for each layer's rows, computes its experts, lets the
  // stream go on. Called once their work is queued or launched (finish) and before the
  // host waits for the stream (moe_batch), never while capturing.
  Status serve_host_calls(std::span<const HostCall> calls);
  // host_bias_ of every host-expert layer, from the device's views.
  Status copy_host_biases();
  Status serve_pending_host_calls() {
    const std::span<const HostCall> pending(step_calls_.data() + step_served_,
                                            step_calls_.size() - step_served_);
    step_served_ = step_calls_.size();
    return serve_host_calls(pending);
  }
  void gather_last_rows();
  Status stage_branches();
  // MLA's per-head products: out row (t, h) (contiguous, w's per-head rows wide) = w[h] .
  // the first w.n_cols values of in row (t, h) (rows in_stride apart): grouped matvecs, one
  // "expert" per head, over chunks of kCudaSmallBatch tokens.
  void head_products(const WeightView& w, const float* in, int64_t in_stride, float* out);

  Sizes sizes_;
  Layout lay_{};
  cuda::Stream stream_;
  std::unique_ptr<cuda::Gemm> gemm_;
  cuda::DeviceBuffer rows_;          // the row buffers (lay_)
  cuda::DeviceBuffer act_;           // quantized activations of a small batch
  cuda::DeviceBuffer attn_scratch_;  // decode attention's partials
  cuda::DeviceBuffer head_ids_;      // MLA: (kCudaSmallBatch * n_head) pair i's head, i % n_head
  cuda::PinnedBuffer step_host_;     // token ids, positions and slots staged for the copy
  // A draft tree's rows: each row's branch (its ancestors' slots by depth, the kernels'
  // AttnDecodeArgs::branch), staged and on the device, branch_cap_ entries each; row r's
  // at branch_at_[r].
  cuda::PinnedBuffer branch_host_;
  cuda::DeviceBuffer branch_dev_;
  size_t branch_cap_ = 0;
  std::vector<int64_t> branch_at_;
  cuda::PinnedBuffer x_host_;          // (max_batch, n_embd) residual rows from a CPU stage
  cuda::PinnedBuffer logits_host_;     // (kGraphSeqs, n_vocab) last rows' logits staged
  cuda::PinnedBuffer sel_host_;        // (max_batch, k) MoE selection of a prompt batch
  cuda::PinnedBuffer pairs_host_;      // (max_batch * k) pairs grouped by expert, their experts
  WeightView stacked_[3];              // expert 0's gate, up, down (experts_stacked)
  std::vector<int64_t> expert_begin_;  // (n_expert + 1) offsets into pairs, host
  std::vector<int64_t> expert_next_;   // (n_expert) fill positions while sorting
  HostExpertLayers host_;
  cuda::PinnedBuffer expert_rows_host_;  // (max_batch, n_embd) a host layer's expert input
  cuda::PinnedBuffer slots_host_;        // (max_batch, k, n_embd) its slot outputs
  cuda::PinnedBuffer flags_;             // (n_layer) HostFlag per layer, mapped
  cuda::HostFlag* flags_dev_ = nullptr;  // their device address
  std::vector<uint32_t> served_;         // (n_layer) handshakes the host completed
  // (3 * host-expert layers) host copies of each layer's expert biases, gate, up, down (the
  // CPU's experts add them as CpuBlocks does: gpt-oss); empty where the layer has none.
  std::vector<std::vector<float>> host_bias_;
  std::vector<HostCall> step_calls_;  // this (eager or captured) step's, in order
  size_t step_served_ = 0;            // step_calls_ served so far
  Status error_;                      // the first error of the batch, returned by finish()
  PendingNorm pending_;
  PendingRope rope_;
  PendingProduct product_;
  Mode mode_ = Mode::kEager;
  bool use_graphs_ = true;  // false (--no-cuda-graphs): every step eager
  int64_t bucket_ = 0;      // the context bucket of the step being captured
  struct StepGraph {
    std::vector<const void*> kv;  // the KV caches' storage the graph reads and writes, in order
    int64_t bucket = 0;
    cuda::Graph graph;
    std::vector<HostCall> host_calls;  // the handshakes each replay needs served, in order
  };
  std::vector<const void*> step_kv_;  // this step's caches (start_step)
  std::vector<StepGraph> graphs_;
  size_t replay_ = 0;  // graphs_ index of the step being replayed
};

Status CudaBlocks::init(const gguf::GgufFile& file) {
  sizes_ = sizes_for(hp_, file, max_batch_);
  lay_ = layout_for(hp_, sizes_);
  HYPURA_ASSIGN_OR_RETURN(stream_, cuda::Stream::create());
  HYPURA_ASSIGN_OR_RETURN(rows_, cuda::DeviceBuffer::allocate(lay_.total));
  HYPURA_ASSIGN_OR_RETURN(
      act_,
      cuda::DeviceBuffer::allocate(cuda::act_q8_layout(sizes_.small_rows * sizes_.max_cols).total));
  HYPURA_ASSIGN_OR_RETURN(attn_scratch_,
                          cuda::DeviceBuffer::allocate(attention_scratch_bytes(hp_, n_ctx_)));
  HYPURA_ASSIGN_OR_RETURN(gemm_, cuda::Gemm::create(s(), max_batch_, sizes_.max_cols,
                                                    sizes_.tile_elems, pair_elems(hp_, sizes_)));
  HYPURA_ASSIGN_OR_RETURN(step_host_,
                          cuda::PinnedBuffer::allocate(static_cast<size_t>(3 * max_batch_) * 4));
  HYPURA_ASSIGN_OR_RETURN(
      x_host_, cuda::PinnedBuffer::allocate(static_cast<size_t>(max_batch_ * hp_.n_embd) * 4));
  HYPURA_ASSIGN_OR_RETURN(logits_host_, cuda::PinnedBuffer::allocate(
                                            static_cast<size_t>(kGraphSeqs * hp_.n_vocab) * 4));
  step_kv_.reserve(static_cast<size_t>(kGraphSeqs));
  if (hp_.n_expert > 0) {
    const size_t pairs = static_cast<size_t>(max_batch_ * sizes_.k) * 4;
    HYPURA_ASSIGN_OR_RETURN(sel_host_, cuda::PinnedBuffer::allocate(pairs));
    HYPURA_ASSIGN_OR_RETURN(pairs_host_, cuda::PinnedBuffer::allocate(2 * pairs));
    expert_begin_.assign(static_cast<size_t>(hp_.n_expert + 1), 0);
    expert_next_.assign(static_cast<size_t>(hp_.n_expert), 0);
  }
  if (host_.experts != nullptr && hp_.n_expert > 0) {
    const auto rows = static_cast<size_t>(max_batch_ * hp_.n_embd) * 4;
    HYPURA_ASSIGN_OR_RETURN(expert_rows_host_, cuda::PinnedBuffer::allocate(rows));
    HYPURA_ASSIGN_OR_RETURN(slots_host_, cuda::PinnedBuffer::allocate(rows * sizes_.k));
    const auto n_flags = static_cast<size_t>(hp_.n_layer);
    HYPURA_ASSIGN_OR_RETURN(flags_, cuda::PinnedBuffer::allocate(n_flags * sizeof(cuda::HostFlag)));
    std::fill_n(flags_.as<cuda::HostFlag>(), n_flags, cuda::HostFlag{});
    HYPURA_ASSIGN_OR_RETURN(void* dev, cuda::mapped_device_pointer(flags_.data()));
    flags_dev_ = static_cast<cuda::HostFlag*>(dev);
    served_.assign(n_flags, 0);
    HYPURA_RETURN_IF_ERROR(copy_host_biases());
  }
  x_ = at(lay_.x);
  cur_ = at(lay_.cur);
  tmp_ = at(lay_.tmp);
  q_ = at(lay_.q);
  k_ = at(lay_.k);
  v_ = at(lay_.v);
  attn_ = at(lay_.attn);
  if (hp_.is_mla()) {
    mla_lora_ = at(lay_.mla_lora);
    mla_heads_ = at(lay_.mla_heads);
    std::vector<int32_t> ids(static_cast<size_t>(kCudaSmallBatch * hp_.n_head));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % hp_.n_head);
    HYPURA_ASSIGN_OR_RETURN(head_ids_, cuda::DeviceBuffer::allocate(ids.size() * 4));
    HYPURA_RETURN_IF_ERROR(cuda::copy_to_device(head_ids_.data(), ids.data(), ids.size() * 4));
  }
  return stream_.synchronize();
}

Status CudaBlocks::copy_host_biases() {
  const int64_t n = std::min(host_.n_layers, hp_.n_layer);
  host_bias_.assign(static_cast<size_t>(3 * n), {});
  for (int64_t il = 0; il < n; ++il) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(il)];
    const TensorId all[3] = {lw.ffn_gate_exps_b, lw.ffn_up_exps_b, lw.ffn_down_exps_b};
    TensorId ids[3];
    int slot[3];
    int m = 0;
    for (int i = 0; i < 3; ++i) {
      if (all[i] == kNone) continue;
      ids[m] = all[i];
      slot[m++] = i;
    }
    if (m == 0) continue;
    WeightView views[3];
    HYPURA_RETURN_IF_ERROR(
        provider_.acquire(static_cast<int>(il), std::span(ids, m), std::span(views, m)));
    for (int i = 0; i < m; ++i) {
      std::vector<float>& b = host_bias_[static_cast<size_t>(3 * il + slot[i])];
      b.resize(static_cast<size_t>(views[i].n_rows * views[i].n_cols));
      HYPURA_RETURN_IF_ERROR(cuda::copy_to_host(b.data(), views[i].data, b.size() * 4));
    }
    provider_.release(static_cast<int>(il));
  }
  return Status::ok();
}

// Eager, capture or replay: a graph for this KV cache and bucket replays; else a decode
// step starts a capture.
void CudaBlocks::start_step() {
  mode_ = Mode::kEager;
  const auto n_seqs = static_cast<int64_t>(seqs_.size());
  // A decode step: one token of each sequence.
  if (!use_graphs_ || n_tokens_ != n_seqs || n_seqs > kGraphSeqs || !logits_only_ ||
      std::any_of(seqs_.begin(), seqs_.end(), is_tree))
    return;
  step_kv_.clear();
  int64_t longest = 0;
  for (const SeqRows& q : seqs_) {
    step_kv_.push_back(q.kv->device_storage());
    longest = std::max(longest, q.pos + 1);
  }
  bucket_ = bucket_for(longest);
  for (size_t i = 0; i < graphs_.size(); ++i) {
    if (graphs_[i].kv == step_kv_ && graphs_[i].bucket == bucket_) {
      mode_ = Mode::kReplay;
      replay_ = i;
      return;
    }
  }
  if (cuda::Graph::begin_capture(s()).is_ok()) mode_ = Mode::kCapture;
}

// The step's token ids (when given) and positions staged and copied to the device: the
// first node of a graph, whose replays copy what this staged. The previous batch ended
// with a synchronize (finish), so the staging buffers are free.
void CudaBlocks::stage_step(const int32_t* tokens) {
  step_calls_.clear();
  step_served_ = 0;
  int32_t* host = step_host_.as<int32_t>();
  if (tokens != nullptr) std::memcpy(host, tokens, static_cast<size_t>(n_tokens_) * 4);
  std::copy_n(row_pos_.data(), n_tokens_, host + max_batch_);
  for (const SeqRows& seq : seqs_) {
    for (int64_t t = 0; t < seq.n_tokens; ++t)
      host[2 * max_batch_ + seq.row0 + t] = static_cast<int32_t>(seq.pos + t);
  }
  start_step();
  pending_ = {};
  product_ = {};
  rope_ = {};
  if (replaying()) return;
  fail(cuda::copy_to_device_async(ints(lay_.step), host, static_cast<size_t>(3 * max_batch_) * 4,
                                  s()));
  fail(stage_branches());
}

// The branches of a draft tree's rows, for their attention. A tree pass is eager (never
// captured), so the buffers may grow here.
Status CudaBlocks::stage_branches() {
  size_t n = 0;
  for (const SeqRows& seq : seqs_) {
    if (!is_tree(seq)) continue;
    for (int64_t t = 0; t < seq.n_tokens; ++t)
      n += static_cast<size_t>(seq.position(t) - seq.tree_base + 1);
  }
  if (n == 0) return Status::ok();
  if (n > branch_cap_) {
    branch_cap_ = std::max(2 * branch_cap_, n);
    HYPURA_RETURN_IF_ERROR(stream_.synchronize());  // the old buffers may still be read
    HYPURA_ASSIGN_OR_RETURN(branch_host_, cuda::PinnedBuffer::allocate(branch_cap_ * 4));
    HYPURA_ASSIGN_OR_RETURN(branch_dev_, cuda::DeviceBuffer::allocate(branch_cap_ * 4));
  }
  branch_at_.resize(static_cast<size_t>(max_batch_));
  int32_t* host = branch_host_.as<int32_t>();
  int64_t at = 0;
  for (const SeqRows& seq : seqs_) {
    if (!is_tree(seq)) continue;
    for (int64_t t = 0; t < seq.n_tokens; ++t) {
      branch_at_[static_cast<size_t>(seq.row0 + t)] = at;
      const int64_t depth = seq.position(t) - seq.tree_base;
      int32_t node = static_cast<int32_t>(seq.pos + t - seq.tree_base);
      for (int64_t d = depth; d >= 0; --d, node = seq.tree_parent[node])
        host[at + d] = static_cast<int32_t>(seq.tree_base + node);
      at += depth + 1;
    }
  }
  return cuda::copy_to_device_async(branch_dev_.data(), host, n * 4, s());
}

void CudaBlocks::embed(const WeightView& table, const int32_t* tokens) {
  stage_step(tokens);
  if (replaying()) return;
  cuda::get_rows_f32(table, ints(lay_.step), n_tokens_, x(), s());
}

// The residual rows through pinned memory, so a graph's copy node reads them there.
void CudaBlocks::continue_from(const float* host_x) {
  const size_t bytes = static_cast<size_t>(n_tokens_ * hp_.n_embd) * 4;
  std::memcpy(x_host_.data(), host_x, bytes);
  stage_step(nullptr);
  if (replaying()) return;
  fail(cuda::copy_to_device_async(x(), x_host_.data(), bytes, s()));
}

void CudaBlocks::norm(const float* in, const WeightView& w, float* out) {
  if (replaying()) return;
  flush_norm();
  if (n_tokens_ <= kCudaSmallBatch && w.n_cols % 32 == 0 && in != out) {
    pending_ = {in, floats(w), w.n_cols, out};
    return;
  }
  cuda::rms_norm(in, floats(w), n_tokens_, w.n_cols, hp_.rms_eps, out, s());
}

void CudaBlocks::flush_norm() {
  if (product_.out != nullptr) {
    PendingProduct p = std::move(product_);
    product_ = {};
    p.launch(nullptr);
  }
  if (pending_.in != nullptr) {
    cuda::rms_norm(pending_.in, pending_.w, n_tokens_, pending_.width, hp_.rms_eps, pending_.out,
                   s());
    pending_ = {};
  }
  if (rope_.pending) {
    const PendingRope r = std::exchange(rope_, {});
    launch_rope_qk(r.freq_base, r.freq_scale);
  }
}

cuda::RopeParams CudaBlocks::rope_params(float freq_base, float freq_scale) const {
  cuda::RopeParams p;
  p.head_dim = hp_.head_dim;
  p.n_rot = hp_.n_rot;
  p.freq_base = freq_base;
  p.freq_scale = freq_scale;
  p.freq_factors = rope_factors_;
  p.neox = hp_.rope_neox;
  if (hp_.yarn_ext_factor != 0.0f) {
    const compute::Yarn y =
        compute::yarn(hp_.n_rot, hp_.n_ctx_orig_yarn, freq_base, hp_.yarn_beta_fast,
                      hp_.yarn_beta_slow, hp_.yarn_ext_factor, hp_.yarn_attn_factor);
    p.ext_factor = y.ext_factor;
    p.corr_lo = y.corr_lo;
    p.corr_hi = y.corr_hi;
    p.mscale = y.attn_factor * (1.0f + 0.1f * std::log(1.0f / freq_scale));
  } else {
    p.mscale = hp_.yarn_attn_factor;
  }
  return p;
}

void CudaBlocks::rope(float* rows, int64_t n_heads, float freq_base, float freq_scale) {
  if (replaying()) return;
  flush_norm();
  cuda::rope(rows, n_tokens_, n_heads, n_heads * hp_.head_dim, positions(),
             rope_params(freq_base, freq_scale), s());
}

void CudaBlocks::rope_qk(float freq_base, float freq_scale) {
  if (replaying()) return;
  flush_norm();
  if (mode_ == Mode::kCapture) {
    rope_ = {true, freq_base, freq_scale};
    return;
  }
  launch_rope_qk(freq_base, freq_scale);
}

void CudaBlocks::launch_rope_qk(float freq_base, float freq_scale) {
  cuda::rope_qk(q(), hp_.n_head, k(), hp_.n_head_kv, n_tokens_, positions(),
                rope_params(freq_base, freq_scale), s());
}

// The latent normed in place (its columns of each k() row), then k_pe rotated.
void CudaBlocks::mla_kv(const WeightView& kv_norm) {
  if (replaying()) return;
  flush_norm();
  const int64_t rank = hp_.kv_lora_rank, d = hp_.head_dim;
  cuda::rms_norm_cols(k(), n_tokens_, d, rank, floats(kv_norm), hp_.rms_eps, s());
  cuda::rope(k() + rank, n_tokens_, 1, d, positions(),
             rope_params(hp_.rope_freq_base, hp_.rope_freq_scale), s());
}

void CudaBlocks::head_products(const WeightView& w, const float* in, int64_t in_stride,
                               float* out) {
  const int64_t h = hp_.n_head;
  const WeightView head{w.data, w.type, w.n_cols, w.n_rows / h};  // head 0's; the rest follow
  if (n_tokens_ > kCudaSmallBatch) {  // a prompt: strided batched products over the heads
    const float* x = in;
    if (in_stride != head.n_cols) {
      cuda::copy_cols(in, in_stride, at(lay_.mla_nope), head.n_cols, n_tokens_ * h, head.n_cols,
                      s());
      x = at(lay_.mla_nope);
    }
    fail(gemm_->matmul_heads(w, h, x, n_tokens_, out));
    return;
  }
  for (int64_t t0 = 0; t0 < n_tokens_; t0 += kCudaSmallBatch) {
    const int64_t rows = std::min(kCudaSmallBatch, n_tokens_ - t0) * h;
    const float* x = in + t0 * h * in_stride;
    if (in_stride != head.n_cols) {  // the rows' first n_cols values, packed
      cuda::copy_cols(x, in_stride, at(lay_.mla_nope), head.n_cols, rows, head.n_cols, s());
      x = at(lay_.mla_nope);
    }
    const cuda::ActQ8 act = cuda::quantize_for(w.type, x, rows * head.n_cols, act_.data(), s());
    cuda::matvec_grouped(head, h, head_ids_.as<int32_t>(), rows, 1, act, out + t0 * h * head.n_rows,
                         s());
  }
}

// q_nope absorbed into the latent space (through attn(), free until attention), then laid
// out beside q_pe, which is rotated.
void CudaBlocks::mla_absorb_q(const float* q_heads, const WeightView& wk_b) {
  if (replaying()) return;
  flush_norm();
  const int64_t dq = hp_.head_dim_mla, d = hp_.head_dim, rank = hp_.kv_lora_rank,
                rows = n_tokens_ * hp_.n_head;
  head_products(wk_b, q_heads, dq, attn());
  cuda::copy_cols(attn(), rank, q(), d, rows, rank, s());
  cuda::copy_cols(q_heads + hp_.qk_nope(), dq, q() + rank, d, rows, hp_.n_rot, s());
  cuda::rope(q() + rank, n_tokens_, hp_.n_head, hp_.n_head * d, positions(),
             rope_params(hp_.rope_freq_base, hp_.rope_freq_scale), s());
}

void CudaBlocks::mla_values(const WeightView& wv_b, float* out) {
  if (replaying()) return;
  flush_norm();
  head_products(wv_b, attn(), hp_.kv_lora_rank, out);
}

void CudaBlocks::matvec_rows(const WeightView& w, const cuda::ActQ8& act, int64_t n, float* out,
                             float* add_to) {
  if (n == 1) {
    cuda::matvec_quantized(w, act, out, s(), add_to);
  } else {
    cuda::matvec_batched(w, act, n, out, s());
    if (add_to != nullptr) cuda::add(add_to, out, n * w.n_rows, s());
  }
}

void CudaBlocks::residual(float* x, const float* y) {
  if (replaying()) return;
  if (product_.out == y && pending_.in == nullptr) {
    PendingProduct p = std::move(product_);
    product_ = {};
    p.launch(x);
    return;
  }
  flush_norm();
  cuda::add(x, y, n_tokens_ * hp_.n_embd, s());
}

cuda::ActQ8 CudaBlocks::activations(gguf::GgmlType type, const float* in, int64_t n_cols, int64_t n,
                                    gguf::GgmlType* cached_type, cuda::ActQ8* cached) {
  const gguf::GgmlType format = quant::activation_type(type);
  if (*cached_type != format) {
    // One quantization for the batch (the formats' blocks never straddle a row).
    *cached = cuda::quantize_for(type, in, n * n_cols, act_.data(), s());
    *cached_type = format;
  }
  return *cached;
}

void CudaBlocks::matmul(const WeightView& w, const float* in, int64_t n, float* out,
                        float* add_to) {
  if (n > kCudaSmallBatch) {
    assert(add_to == nullptr);
    fail(gemm_->matmul(w, in, n, out));
    return;
  }
  gguf::GgmlType none = kNothingCached;
  cuda::ActQ8 act;
  matvec_rows(w, activations(w.type, in, w.n_cols, n, &none, &act), n, out, add_to);
}

// Small batches: the matrices of one type (and width) in one launch per row, on one
// quantization of `in` per activation format.
// Small batches: products sharing an input quantize it once per activation format. (One
// launch for Q, K and V measured slower than the shape-tuned launches: docs/GPU.md.)
void CudaBlocks::shared_input(const WeightView* const* ws, float* const* outs, int n,
                              const float* in) {
  gguf::GgmlType cached_type = kNothingCached;
  cuda::ActQ8 act;
  cuda::ActFormat format;
  if (product_.out != nullptr) flush_norm();  // (never pending beside a norm)
  if (pending_.in != nullptr && pending_.out == in && act_format(ws[0]->type, &format) &&
      cuda::norm_quantize_fits(format, pending_.width)) {
    act = cuda::rms_norm_quantize(pending_.in, pending_.w, n_tokens_, pending_.width, hp_.rms_eps,
                                  pending_.out, format, act_.data(), s());
    cached_type = quant::activation_type(ws[0]->type);
    pending_ = {};
  }
  flush_norm();
  for (int i = 0; i < n; ++i) {
    const WeightView& w = *ws[i];
    const cuda::ActQ8 a = activations(w.type, in, w.n_cols, n_tokens_, &cached_type, &act);
    // One token through two matrices of one type and shape (K and V, gate and up): one
    // launch, one ramp and tail.
    if (n_tokens_ == 1 && i + 1 < n && ws[i + 1]->type == w.type && ws[i + 1]->n_rows == w.n_rows &&
        ws[i + 1]->n_cols == w.n_cols) {
      cuda::matvec_pair(w, *ws[i + 1], a, outs[i], outs[i + 1], s());
      ++i;
      continue;
    }
    matvec_rows(w, a, n_tokens_, outs[i]);
  }
}

void CudaBlocks::project_qkv(const AttnViews& a, const float* in) {
  if (replaying()) return;
  const WeightView* ws[3] = {&a.wq, &a.wk, &a.wv};
  float* outs[3] = {q(), k(), v()};
  if (n_tokens_ > kCudaSmallBatch) {
    flush_norm();
    fail(gemm_->matmul_shared(ws, outs, 3, in, n_tokens_));
    return;
  }
  shared_input(ws, outs, 3, in);
}

void CudaBlocks::attention(int64_t il, bool swa, float kq_scale, const WeightView& sinks) {
  sinks_ = static_cast<const float*>(sinks.data);
  if (replaying()) return;
  // Pending in a captured step only, taken before flush_norm launches it.
  const PendingRope rope = std::exchange(rope_, {});
  flush_norm();
  // A captured decode step: every sequence's one row, rows in sequence order.
  if (mode_ == Mode::kCapture) {
    attend_step(il, swa, kq_scale, rope);
    return;
  }
  for (const SeqRows& seq : seqs_) attend_seq(il, seq, swa, kq_scale);
}

// A captured decode step's attention in one launch (and its cache writes in one): each
// sequence's one token attends to its visible keys from its device position, in a launch
// sized for the bucket's keys, exactly as it would alone in a step of that bucket.
void CudaBlocks::attend_step(int64_t il, bool swa, float kq_scale, const PendingRope& rope) {
  const bool latent = hp_.is_mla();
  cuda::AttnSeqs caches;
  caches.n = static_cast<int>(seqs_.size());
  caches.q_stride = hp_.q_width();
  caches.out_stride = hp_.n_head * hp_.head_dim_v;
  for (size_t i = 0; i < seqs_.size(); ++i) {
    caches.k[i] = static_cast<uint16_t*>(seqs_[i].kv->device_k(il));
    caches.v[i] = latent ? caches.k[i] : static_cast<uint16_t*>(seqs_[i].kv->device_v(il));
  }
  const int64_t v_width = latent ? 0 : hp_.v_width();
  if (rope.pending) {
    cuda::rope_qk_store_seqs(q(), hp_.n_head, k(), hp_.n_head_kv, v(), v_width, positions(),
                             rope_params(rope.freq_base, rope.freq_scale), caches, s());
  } else {
    cuda::store_kv_f16_seqs(k(), v(), hp_.k_width(), v_width, slots(), caches, s());
  }
  cuda::AttnDecodeArgs a;
  attention_shape(a, nullptr, nullptr, kq_scale);  // the caches are each sequence's
  a.q = q();
  a.out = attn();
  a.pos = positions();
  a.n_swa = swa ? hp_.n_swa : 0;
  a.max_kv = swa ? std::min(bucket_, hp_.n_swa) : bucket_;
  const size_t per_seq =
      cuda::attention_scratch_bytes(hp_.n_head, hp_.n_head_kv, hp_.head_dim_v, a.max_kv);
  if (per_seq * seqs_.size() <= attn_scratch_.size()) {
    cuda::attention_decode_seqs(a, caches, attn_scratch_.data(), s());
    return;
  }
  // A bucket past kStepAttentionKeys: a launch per sequence, each the same computation.
  for (int i = 0; i < caches.n; ++i) {
    cuda::AttnSeqs one;
    one.k[0] = caches.k[i];
    one.v[0] = caches.v[i];
    cuda::AttnDecodeArgs ai = a;
    ai.q = a.q + i * caches.q_stride;
    ai.out = a.out + i * caches.out_stride;
    ai.pos = a.pos + i;
    cuda::attention_decode_seqs(ai, one, attn_scratch_.data(), s());
  }
}

// One sequence's rows: its keys and values stored in its cache, then its queries attended.
// MLA caches keys only and reads the values from them (the kernels' latent form).
void CudaBlocks::attend_seq(int64_t il, const SeqRows& seq, bool swa, float kq_scale) {
  const bool latent = hp_.is_mla();
  auto* kc = static_cast<uint16_t*>(seq.kv->device_k(il));
  auto* vc = latent ? kc : static_cast<uint16_t*>(seq.kv->device_v(il));
  const int64_t r0 = seq.row0, n = seq.n_tokens;
  const int64_t v_width = latent ? 0 : hp_.v_width();
  float* q_rows = q() + r0 * hp_.q_width();
  float* out_rows = attn() + r0 * hp_.n_head * hp_.head_dim_v;
  cuda::store_kv_f16(k() + r0 * hp_.k_width(), v() + r0 * v_width, n, hp_.k_width(), v_width,
                     slots() + r0, kc, vc, s());
  // Few rows, or a speculative pass's rows (every row's logits wanted): each row attends
  // as its token would in a decode step of this sequence alone (the replayable form, its
  // position read on the device, the launch sized for its bucket), so a verified guess
  // gets the logits plain decoding would have given it, bit for bit. A draft tree's row
  // reads the keys of its own branch.
  if (is_tree(seq) || n <= kCudaDecodeAttention || (seq.n_logits > 1 && n <= kCudaSmallBatch)) {
    cuda::AttnDecodeArgs a;
    attention_shape(a, kc, vc, kq_scale);
    a.n_swa = swa ? hp_.n_swa : 0;
    if (is_tree(seq)) a.branch_base = seq.tree_base;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t bucket = bucket_for(seq.position(t) + 1);
      a.q = q_rows + t * hp_.q_width();
      a.out = out_rows + t * hp_.n_head * hp_.head_dim_v;
      a.pos = positions() + r0 + t;
      if (is_tree(seq))
        a.branch = static_cast<const int32_t*>(branch_dev_.data()) +
                   branch_at_[static_cast<size_t>(r0 + t)];
      a.max_kv = swa ? std::min(bucket, hp_.n_swa) : bucket;
      cuda::attention_decode(a, attn_scratch_.data(), s());
    }
    return;
  }
  cuda::AttnPrefillArgs a;
  attention_shape(a, kc, vc, kq_scale);
  a.q = q_rows;
  a.out = out_rows;
  a.n_tokens = n;
  a.pos0 = seq.pos;
  a.n_swa = swa ? hp_.n_swa : 0;
  cuda::attention_prefill(a, s());
}

cuda::UnaryOp unary_op(FfnAct act) {
  // ggml's CPU GELU rounds input and output through fp16; so do both our devices.
  switch (act) {
    case FfnAct::kSilu:
      return cuda::UnaryOp::kSilu;
    case FfnAct::kSwigluOai:
      return cuda::UnaryOp::kSwigluOai;
    case FfnAct::kGeluTanh:
      break;
  }
  return cuda::UnaryOp::kGeluTanhFp16;
}

void CudaBlocks::dense_ffn(const FfnViews& w, FfnAct act, const float* in, float* out) {
  if (replaying()) return;
  gated_ffn(w.gate, w.up, w.down, act, in, out, /*defer=*/true);
}

void CudaBlocks::gated_ffn(const WeightView& gate_w, const WeightView& up_w, const WeightView& down,
                           FfnAct act, const float* in, float* out, bool defer) {
  float* gate = at(lay_.ff_gate);
  float* up = at(lay_.ff_up);
  const int64_t n_ff = n_tokens_ * gate_w.n_rows;
  const WeightView* ws[2] = {&gate_w, &up_w};  // gate and up share their input
  float* outs[2] = {gate, up};
  if (n_tokens_ > kCudaSmallBatch) {
    flush_norm();
    fail(gemm_->matmul_shared(ws, outs, 2, in, n_tokens_));
    cuda::glu(unary_op(act), gate, up, n_ff, s());
    matmul(down, gate, n_tokens_, out);
    return;
  }
  shared_input(ws, outs, 2, in);
  std::function<void(float*)> launch;
  // The activation and the rounding of its result for down in one launch.
  cuda::ActFormat format;
  if (act_format(down.type, &format) && gate_w.n_rows % 256 == 0) {
    const cuda::ActQ8 a =
        cuda::glu_quantize(unary_op(act), gate, up, n_ff, format, act_.data(), s());
    launch = [this, down, a, out](float* add_to) { matvec_rows(down, a, n_tokens_, out, add_to); };
  } else {
    cuda::glu(unary_op(act), gate, up, n_ff, s());
    launch = [this, down, gate, out](float* add_to) { matmul(down, gate, n_tokens_, out, add_to); };
  }
  if (defer) {
    defer_product(out, std::move(launch));
  } else {
    launch(nullptr);
  }
}

// After the routed experts (their buffers free again): the shared expert's SwiGLU FFN,
// summed into the routed sum by the combine (once, whichever launch adds it).
const float* CudaBlocks::shared_expert(const FfnViews& w, const float* in) {
  if (w.down_shexp.data == nullptr) return nullptr;
  float* out = at(lay_.shared);
  gated_ffn(w.gate_shexp, w.up_shexp, w.down_shexp, FfnAct::kSilu, in, out, /*defer=*/false);
  return out;
}

Status CudaBlocks::moe_ffn(int64_t il, const FfnViews& w, const float* in, float* out) {
  if (replaying()) return Status::ok();
  if (experts_on_host(il)) {
    flush_norm();
    matmul(w.router, in, n_tokens_, at(lay_.probs));
    route(w);
    const float* shared = moe_on_host(il, w, in, at(lay_.slot_out));
    combine_slots(out, shared);
    return Status::ok();
  }
  if (n_tokens_ > kCudaSmallBatch) {
    flush_norm();
    matmul(w.router, in, n_tokens_, at(lay_.probs));
    route(w);
    HYPURA_RETURN_IF_ERROR(moe_batch(w, il, in, at(lay_.slot_out)));
    combine_slots(out, shared_expert(w, in));
    return Status::ok();
  }
  // Few tokens: the pending norm and the rounding of its output for the experts' gate and up
  // in one launch, kept through the router's product when that reads floats or the same
  // rounding; one launch for the routing; the slot sum waits for the residual.
  const ExpertRequest requests[3] = {{w.gate_exps, 0}, {w.up_exps, 0}, {w.down_exps, 0}};
  WeightView e0[3];  // expert 0's matrices: the stacked tensors' starts and shapes
  HYPURA_RETURN_IF_ERROR(provider_.acquire_experts(static_cast<int>(il), requests, e0));
  if (product_.out != nullptr) flush_norm();  // (never pending beside a norm)
  const gguf::GgmlType gate_act = quant::activation_type(e0[0].type);
  const gguf::GgmlType router_act = quant::activation_type(w.router.type);
  cuda::ActQ8 act;
  bool have_act = false;
  cuda::ActFormat format, router_format;
  const bool router_float = !act_format(w.router.type, &router_format);
  if (pending_.in != nullptr && pending_.out == in && act_format(e0[0].type, &format) &&
      cuda::norm_quantize_fits(format, pending_.width) &&
      (router_float || router_act == gate_act)) {
    act = cuda::rms_norm_quantize(pending_.in, pending_.w, n_tokens_, pending_.width, hp_.rms_eps,
                                  pending_.out, format, act_.data(), s());
    pending_ = {};
    have_act = true;
  }
  flush_norm();
  if (have_act && router_act == gate_act) {
    matvec_rows(w.router, act, n_tokens_, at(lay_.probs));
  } else {
    matmul(w.router, in, n_tokens_, at(lay_.probs));
  }
  route(w);
  HYPURA_RETURN_IF_ERROR(moe_small(w, e0, in, have_act ? &act : nullptr, at(lay_.slot_out)));
  combine_slots(out, shared_expert(w, in));
  return Status::ok();
}

void CudaBlocks::route(const FfnViews& w) {
  cuda::moe_route(at(lay_.probs), n_tokens_, hp_.n_expert, hp_.n_expert_used, ints(lay_.selected),
                  at(lay_.weights), s(),
                  cuda_route_options(hp_, as_floats(w.router_b), as_floats(w.exp_probs_b)));
}

// A small batch's sum waits for the residual that follows (PendingProduct), a larger one
// is launched now.
void CudaBlocks::combine_slots(float* out, const float* shared) {
  float* slot_out = at(lay_.slot_out);
  float* weights = at(lay_.weights);
  const int64_t k = hp_.n_expert_used;
  const auto combine = [this, slot_out, weights, k, out, shared](float* add_to) {
    cuda::moe_combine(slot_out, weights, n_tokens_, k, hp_.n_embd, out, s(), add_to, shared);
  };
  if (n_tokens_ <= kCudaSmallBatch) {
    defer_product(out, combine);
  } else {
    combine(nullptr);
  }
}

// Few tokens: every (token, slot) pair's expert product in one grouped launch per matrix
// (gate and up together when they share a type), reading the selection on the device.
// act: `in` already rounded for gate's type, or null.
Status CudaBlocks::moe_small(const FfnViews& w, const WeightView (&e)[3], const float* in,
                             const cuda::ActQ8* act_in, float* slot_out) {
  const int64_t k = hp_.n_expert_used, n_pairs = n_tokens_ * k, n_expert = hp_.n_expert;
  const WeightView &gate = e[0], &up = e[1], &down = e[2];
  float* g = at(lay_.ff_gate);
  float* u = at(lay_.ff_up);
  const int32_t* sel = ints(lay_.selected);
  const int act_div = static_cast<int>(k);
  cuda::ActQ8 act = act_in != nullptr ? *act_in
                                      : cuda::quantize_for(gate.type, in, n_tokens_ * gate.n_cols,
                                                           act_.data(), s());
  if (gate.type == up.type && gate.n_rows == up.n_rows && gate.n_cols == up.n_cols) {
    cuda::matvec_grouped_pair(gate, up, n_expert, sel, n_pairs, act_div, act, g, u, s());
  } else {
    cuda::matvec_grouped(gate, n_expert, sel, n_pairs, act_div, act, g, s());
    if (quant::activation_type(gate.type) != quant::activation_type(up.type)) {
      act = cuda::quantize_for(up.type, in, n_tokens_ * up.n_cols, act_.data(), s());
    }
    cuda::matvec_grouped(up, n_expert, sel, n_pairs, act_div, act, u, s());
  }
  cuda::add_rows_by_id(g, as_floats(w.gate_exps_b), sel, n_pairs, gate.n_rows, s());
  cuda::add_rows_by_id(u, as_floats(w.up_exps_b), sel, n_pairs, up.n_rows, s());
  const cuda::UnaryOp op = unary_op(hp_.expert_act);
  cuda::ActFormat format;
  if (act_format(down.type, &format) && (n_pairs * gate.n_rows) % 256 == 0) {
    act = cuda::glu_quantize(op, g, u, n_pairs * gate.n_rows, format, act_.data(), s());
  } else {
    cuda::glu(op, g, u, n_pairs * gate.n_rows, s());
    act = cuda::quantize_for(down.type, g, n_pairs * down.n_cols, act_.data(), s());
  }
  cuda::matvec_grouped(down, n_expert, sel, n_pairs, 1, act, slot_out, s());
  cuda::add_rows_by_id(slot_out, as_floats(w.down_exps_b), sel, n_pairs, hp_.n_embd, s());
  return Status::ok();
}

// A prompt batch: the selection to the host, then per used expert (ascending id) its rows
// gathered, multiplied as a matrix and scattered to their (token, slot) rows.
Status CudaBlocks::moe_batch(const FfnViews& w, int64_t il, const float* in, float* slot_out) {
  const int64_t k = hp_.n_expert_used, ne = hp_.n_expert, n_pairs = n_tokens_ * k;
  int32_t* sel = sel_host_.as<int32_t>();
  int32_t* pairs = pairs_host_.as<int32_t>();
  HYPURA_RETURN_IF_ERROR(
      cuda::copy_to_host_async(sel, ints(lay_.selected), static_cast<size_t>(n_pairs) * 4, s()));
  HYPURA_RETURN_IF_ERROR(serve_pending_host_calls());  // earlier host layers of this pass
  HYPURA_RETURN_IF_ERROR(stream_.synchronize());
  // Counting sort of the pairs by expert, pairs ascending within an expert.
  std::fill(expert_begin_.begin(), expert_begin_.end(), 0);
  for (int64_t i = 0; i < n_pairs; ++i) {
    if (sel[i] < 0 || sel[i] >= ne)
      return Status(StatusCode::kInternal, "GPU routing chose no expert");
    ++expert_begin_[sel[i] + 1];
  }
  for (int64_t e = 0; e < ne; ++e) expert_begin_[e + 1] += expert_begin_[e];
  const std::vector<int64_t>& fill = expert_begin_;
  std::copy(fill.begin(), fill.end() - 1, expert_next_.begin());
  int32_t* pair_expert = pairs + n_pairs;  // each grouped row's expert
  for (int64_t i = 0; i < n_pairs; ++i) {
    pair_expert[expert_next_[sel[i]]] = sel[i];
    pairs[expert_next_[sel[i]]++] = static_cast<int32_t>(i);
  }
  int32_t* pairs_dev = ints(lay_.pairs);
  HYPURA_ASSIGN_OR_RETURN(const bool stacked, experts_stacked(w, il));
  HYPURA_RETURN_IF_ERROR(cuda::copy_to_device_async(
      pairs_dev, pairs, static_cast<size_t>((stacked ? 2 : 1) * n_pairs) * 4, s()));
  if (stacked) return moe_batch_stacked(w, in, slot_out);
  float* ein = at(lay_.expert_in);
  float* eout = at(lay_.expert_out);
  float* g = at(lay_.ff_gate);
  float* u = at(lay_.ff_up);
  for (int32_t e = 0; e < ne; ++e) {
    const int64_t off = fill[e], m = fill[e + 1] - fill[e];
    if (m == 0) continue;
    const ExpertRequest requests[3] = {{w.gate_exps, e}, {w.up_exps, e}, {w.down_exps, e}};
    WeightView views[3];
    HYPURA_RETURN_IF_ERROR(provider_.acquire_experts(static_cast<int>(il), requests, views));
    cuda::gather_rows(in, pairs_dev + off, m, k, hp_.n_embd, ein, s());
    if (m > kCudaSmallBatch) {
      const WeightView* ws[2] = {&views[0], &views[1]};
      float* outs[2] = {g, u};
      fail(gemm_->matmul_shared(ws, outs, 2, ein, m));
    } else {
      matmul(views[0], ein, m, g);
      matmul(views[1], ein, m, u);
    }
    const int64_t ff = views[0].n_rows;
    if (w.gate_exps_b.data != nullptr)
      cuda::add_rows(g, as_floats(w.gate_exps_b) + e * ff, m, ff, s());
    if (w.up_exps_b.data != nullptr) cuda::add_rows(u, as_floats(w.up_exps_b) + e * ff, m, ff, s());
    cuda::glu(unary_op(hp_.expert_act), g, u, m * ff, s());
    matmul(views[2], g, m, eout);
    cuda::scatter_rows(eout, pairs_dev + off, m, hp_.n_embd, slot_out, s());
  }
  cuda::add_rows_by_id(slot_out, as_floats(w.down_exps_b), ints(lay_.selected), n_pairs, hp_.n_embd,
                       s());
  return Status::ok();
}

// Whether every expert's matrices lie at expert 0's plus its index times their bytes (a
// resident or staged stacked tensor), so a prompt's products may run over all experts at once.
Result<bool> CudaBlocks::experts_stacked(const FfnViews& w, int64_t il) {
  const auto last = static_cast<int32_t>(hp_.n_expert - 1);
  const ExpertRequest first[3] = {{w.gate_exps, 0}, {w.up_exps, 0}, {w.down_exps, 0}};
  const ExpertRequest end[3] = {{w.gate_exps, last}, {w.up_exps, last}, {w.down_exps, last}};
  WeightView v0[3], v1[3];
  HYPURA_RETURN_IF_ERROR(provider_.acquire_experts(static_cast<int>(il), first, v0));
  HYPURA_RETURN_IF_ERROR(provider_.acquire_experts(static_cast<int>(il), end, v1));
  for (int i = 0; i < 3; ++i) {
    const size_t bytes = quant::row_size(v0[i].type, v0[i].n_cols) * v0[i].n_rows;
    if (static_cast<const uint8_t*>(v1[i].data) !=
        static_cast<const uint8_t*>(v0[i].data) + static_cast<size_t>(last) * bytes)
      return false;
  }
  for (int i = 0; i < 3; ++i) stacked_[i] = v0[i];
  return true;
}

// Every expert at once (expert_begin_ and the grouped pairs and their experts on the
// device): one gather, gate and up over all grouped rows, one activation, down, one scatter.
Status CudaBlocks::moe_batch_stacked(const FfnViews& w, const float* in, float* slot_out) {
  const int64_t k = hp_.n_expert_used, n_pairs = n_tokens_ * k, ff = stacked_[0].n_rows;
  const int32_t* pairs_dev = ints(lay_.pairs);
  const int32_t* expert_of = pairs_dev + n_pairs;
  float* ein = at(lay_.expert_in);
  float* eout = at(lay_.expert_out);
  float* g = at(lay_.pair_gate);
  float* u = at(lay_.pair_up);
  cuda::gather_rows(in, pairs_dev, n_pairs, k, hp_.n_embd, ein, s());
  const WeightView* gu[2] = {&stacked_[0], &stacked_[1]};
  float* gu_out[2] = {g, u};
  fail(gemm_->matmul_experts(gu, gu_out, 2, expert_begin_, ein));
  cuda::add_rows_by_id(g, as_floats(w.gate_exps_b), expert_of, n_pairs, ff, s());
  cuda::add_rows_by_id(u, as_floats(w.up_exps_b), expert_of, n_pairs, ff, s());
  cuda::glu(unary_op(hp_.expert_act), g, u, n_pairs * ff, s());
  const WeightView* d[1] = {&stacked_[2]};
  float* d_out[1] = {eout};
  fail(gemm_->matmul_experts(d, d_out, 1, expert_begin_, g));
  cuda::scatter_rows(eout, pairs_dev, n_pairs, hp_.n_embd, slot_out, s());
  cuda::add_rows_by_id(slot_out, as_floats(w.down_exps_b), ints(lay_.selected), n_pairs, hp_.n_embd,
                       s());
  return Status::ok();
}

const float* CudaBlocks::moe_on_host(int64_t il, const FfnViews& w, const float* in,
                                     float* slot_out) {
  const int64_t k = hp_.n_expert_used, e = hp_.n_embd;
  const auto rows = static_cast<size_t>(n_tokens_ * e) * 4;
  fail(cuda::copy_to_host_async(expert_rows_host_.data(), in, rows, s()));
  fail(cuda::copy_to_host_async(sel_host_.data(), ints(lay_.selected),
                                static_cast<size_t>(n_tokens_ * k) * 4, s()));
  cuda::signal_host(flags_dev_ + il, s());
  const float* shared = shared_expert(w, in);
  cuda::wait_for_host(flags_dev_ + il, s());
  fail(
      cuda::copy_to_device_async(slot_out, slots_host_.data(), rows * static_cast<size_t>(k), s()));
  const auto bias = [&](int i) {
    const std::vector<float>& b = host_bias_[static_cast<size_t>(3 * il + i)];
    return b.empty() ? nullptr : b.data();
  };
  step_calls_.push_back(
      {il, n_tokens_, {w.gate_exps, w.up_exps, w.down_exps, bias(0), bias(1), bias(2)}});
  return shared;
}

// The stream raises a layer's flag once its rows are down, and waits on it until the host
// copies it to `done`: the host's wait is bounded too, so a stream that died (an earlier
// kernel failed) fails the pass instead of hanging it.
Status CudaBlocks::serve_host_calls(std::span<const HostCall> calls) {
  constexpr double kTimeoutS = 30;
  cuda::HostFlag* flags = flags_.as<cuda::HostFlag>();
  Status first;
  for (const HostCall& c : calls) {
    cuda::HostFlag& flag = flags[c.il];
    const uint32_t round = served_[static_cast<size_t>(c.il)] + 1;
    if (!flag.wait_ready(round, kTimeoutS)) {
      return Status(StatusCode::kInternal,
                    "the GPU never handed layer " + std::to_string(c.il) + "'s rows to the CPU");
    }
    Status st = host_.experts->run(c.il, c.tensors, expert_rows_host_.as<float>(), c.n_rows,
                                   sel_host_.as<int32_t>(), nullptr, slots_host_.as<float>());
    // A streaming provider's cache slots of this layer's experts may be reused now.
    host_.experts->provider().release(static_cast<int>(c.il));
    if (first.is_ok() && !st.is_ok())
      first = st.with_context("the CPU's experts of layer " + std::to_string(c.il));
    flag.set_done(round);  // even after an error: the stream must not wait in vain
    served_[static_cast<size_t>(c.il)] = round;
  }
  return first;
}

// tmp() = cur()'s last n_logits rows of each sequence, in order (device copies on the stream).
void CudaBlocks::gather_last_rows() {
  const int64_t e = hp_.n_embd;
  int64_t out = 0;
  for (const SeqRows& q : seqs_) {
    fail(cuda::copy_device_to_device_async(tmp() + out * e,
                                           cur() + (q.row0 + q.n_tokens - q.n_logits) * e,
                                           static_cast<size_t>(q.n_logits * e) * 4, s()));
    out += q.n_logits;
  }
}

Status CudaBlocks::finish(const WeightView& output, float* logits, float* hidden) {
  const int64_t e = hp_.n_embd, nv = hp_.n_vocab;
  const auto n_seqs = static_cast<int64_t>(seqs_.size());
  // One row's logits of each of at most kGraphSeqs sequences are staged in pinned memory (a
  // graph's copy needs it); more rows, or more sequences, go straight to `logits`.
  const bool staged = logits != nullptr && logit_rows_ == n_seqs && n_seqs <= kGraphSeqs;
  // The host thread serves the pass's host-expert layers (if any) once their work is
  // queued: after the launch of a graph, before an eager pass's copies to pageable memory,
  // which would block this thread until the stream, waiting for it, got there.
  Status st, served;
  if (replaying()) {
    st = graphs_[replay_].graph.launch(s());
    if (st.is_ok()) served = serve_host_calls(graphs_[replay_].host_calls);
  } else {
    flush_norm();
    if (mode_ == Mode::kEager) served = serve_pending_host_calls();
    if (hidden != nullptr) {
      fail(cuda::copy_to_host_async(hidden, cur(), static_cast<size_t>(n_tokens_ * e) * 4, s()));
    }
    float* dev_logits = at(lay_.logits);
    // Logits of n rows from `rows`, kLogitRows at a time, straight into `logits`.
    const auto head_rows = [&](const float* rows, int64_t n) {
      for (int64_t r0 = 0; r0 < n; r0 += kLogitRows) {
        const int64_t m = std::min(kLogitRows, n - r0);
        matmul(output, rows + r0 * e, m, dev_logits);
        fail(cuda::copy_to_host_async(logits + r0 * nv, dev_logits, static_cast<size_t>(m * nv) * 4,
                                      s()));
      }
    };
    if (logits != nullptr) {  // the last n_logits rows of each sequence
      const int64_t m = logit_rows_;
      // Every row, or one sequence's last rows, are contiguous already; else gathered.
      const float* rows = cur() + (n_tokens_ - m) * e;
      if (m < n_tokens_ && n_seqs > 1) {
        gather_last_rows();
        rows = tmp();
      }
      if (!staged) {
        head_rows(rows, m);
      } else {
        matmul(output, rows, m, dev_logits);
        fail(cuda::copy_to_host_async(logits_host_.data(), dev_logits,
                                      static_cast<size_t>(m * nv) * 4, s()));
      }
    }
    if (mode_ == Mode::kCapture) {
      auto graph = cuda::Graph::end_capture(s());
      if (graph.is_ok()) {
        if (graphs_.size() == kMaxGraphs) graphs_.erase(graphs_.begin());
        graphs_.push_back({step_kv_, bucket_, std::move(graph).value(), step_calls_});
        st = graphs_.back().graph.launch(s());
        if (st.is_ok()) served = serve_pending_host_calls();
      } else {
        use_graphs_ = false;  // this step's work was only recorded: it is lost
        st = graph.status().with_context("capturing a decode step");
        step_served_ = step_calls_.size();  // nothing will signal them
      }
    }
  }
  const std::vector<HostCall>& calls = replaying() ? graphs_[replay_].host_calls : step_calls_;
  mode_ = Mode::kEager;
  Status synced = stream_.synchronize();
  for (const HostCall& c : calls) {
    if (flags_.as<cuda::HostFlag>()[c.il].timed_out != 0)
      served = Status(StatusCode::kInternal, "the GPU gave up waiting for the CPU's experts");
  }
  if (!served.is_ok()) synced = served;
  if (!error_.is_ok()) synced = error_;
  if (!st.is_ok()) synced = st;
  error_ = Status::ok();
  HYPURA_RETURN_IF_ERROR(synced.with_context("GPU forward pass"));
  if (staged) {
    std::memcpy(logits, logits_host_.data(), seqs_.size() * static_cast<size_t>(nv) * 4);
  }
  return Status::ok();
}

}  // namespace

uint64_t cuda_blocks_bytes(const HParams& hp, const gguf::GgufFile& file, int64_t max_batch,
                           int64_t n_ctx) {
  const Sizes s = sizes_for(hp, file, max_batch);
  constexpr uint64_t kCublasWorkspace = uint64_t{64} << 20;  // cuBLAS's own, an estimate
  return layout_for(hp, s).total + cuda::act_q8_layout(s.small_rows * s.max_cols).total +
         attention_scratch_bytes(hp, n_ctx) +
         cuda::Gemm::scratch_bytes(max_batch, s.max_cols, std::max(s.tile_elems, 64 * s.max_cols),
                                   pair_elems(hp, s)) +
         kCublasWorkspace;
}

Result<std::unique_ptr<Blocks>> make_cuda_blocks(const HParams& hp, const WeightMap& weights,
                                                 const gguf::GgufFile& file,
                                                 WeightProvider& device_weights, int64_t max_batch,
                                                 int64_t n_ctx, HostExpertLayers host,
                                                 bool graphs) {
  HYPURA_RETURN_IF_ERROR(cuda_supports(hp, file));
  auto b =
      std::make_unique<CudaBlocks>(hp, weights, device_weights, max_batch, n_ctx, host, graphs);
  HYPURA_RETURN_IF_ERROR(b->init(file).with_context("GPU buffers"));
  return std::unique_ptr<Blocks>(std::move(b));
}

#else  // !HYPURA_HAVE_CUDA

uint64_t cuda_blocks_bytes(const HParams&, const gguf::GgufFile&, int64_t, int64_t) {
  return 0;
}

Result<std::unique_ptr<Blocks>> make_cuda_blocks(const HParams&, const WeightMap&,
                                                 const gguf::GgufFile&, WeightProvider&, int64_t,
                                                 int64_t, HostExpertLayers, bool) {
  return unsupported("this build has no CUDA backend (HYPURA_CUDA)");
}

#endif

}  // namespace hypura::model
