// The compute interface the model code uses: quantized matrix products and the F32
// helpers of a transformer, on a persistent CPU thread pool.
//
// Model code calls only this header; SIMD paths live in compute/cpu/ and are picked once
// at start from CPUID, or per Context by name (scalar|avx2|avx512|avx512vnni|amx: --simd).
//
// Batch invariance: every output element of matmul() is reduced in the same order
// whatever n_tokens or the thread count, so a prompt processed in one batch, in chunks
// or token by token gives bit-identical rows.
//
// Thread-safety: a Context is used by one caller at a time (it owns scratch buffers and
// the pool). No allocation on the per-token path once reserve() has sized the scratch.
//
// Weights: W.type must satisfy quant::is_supported() and W.n_cols must be a multiple of
// its block size; callers validate untrusted files before building views (matmul only
// asserts). Activations are rounded as llama.cpp's CPU backend rounds them (Q8_K for
// K-quants, Q8_0 for Q4_0/Q5_0/Q8_0/MXFP4, Q8_1 for Q4_1/Q5_1); F32/F16/BF16 weights multiply
// float activations directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace hypura::compute {

// A weight matrix in GGUF layout: n_rows rows of n_cols elements of `type`, rows contiguous.
struct WeightView {
  const void* data = nullptr;
  gguf::GgmlType type = gguf::GgmlType::F32;
  int64_t n_cols = 0;  // ne[0], the reduction dimension
  int64_t n_rows = 0;  // ne[1] (times ne[2] for stacked expert tensors)

  uint64_t row_bytes() const { return gguf::row_bytes(type, n_cols); }
  const void* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<uint64_t>(r) * row_bytes();
  }
  // Rows [first, first + count) as a matrix of their own (one expert of a stacked tensor).
  WeightView rows(int64_t first, int64_t count) const {
    return WeightView{row(first), type, n_cols, count};
  }
};

// Rows of a KV cache: row i of the run starts at data + i * stride elements.
struct KvRows {
  const void* data = nullptr;
  int64_t stride = 0;  // elements between rows
  bool f16 = true;     // F16 elements, else F32
};

// The most keys one attention_step() takes (a key block).
constexpr int64_t kAttnMaxKeys = 64;
// Query rows the SIMD attention step computes together (each key and value load serves
// all of them).
constexpr int64_t kAttnTileRows = 4;

// Buffers the kernels stream through with full-width loads start on a cache line: a
// 64-byte load from a 16-byte-aligned vector<float> spans two lines every time (the AVX-512
// attention step ran 17 % slower than AVX2 on such scratch).
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};
template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

// Query rows of one attention step with their running softmax state (flash attention's
// online softmax): for row r, the block's keys lo[r] <= j < hi[r] are visible (lo == hi:
// none), and the step computes s_j = dot(q[r], k_j) * scale, then
//   m' = max(m[r], max_j s_j),  l[r] = l[r] * exp(m[r] - m') + sum_j exp(s_j - m'),
//   acc[r] = acc[r] * exp(m[r] - m') + sum_j exp(s_j - m') * v_j   (j ascending),
// with the sum of exps taken over 8 lanes of absolute key positions in a fixed order, so
// a row's result depends only on its own query and visible keys, never on the other rows.
// A row with nothing summed yet has l[r] == 0 and m[r] == -inf.
struct AttentionRows {
  int64_t n_rows = 0;
  int64_t head_dim = 0;             // length of q and k vectors
  int64_t head_dim_v = 0;           // length of v vectors and acc rows
  float scale = 1.0f;               // applied to q . k
  const float* const* q = nullptr;  // (n_rows) pointers to head_dim floats
  const int32_t* lo = nullptr;      // (n_rows)
  const int32_t* hi = nullptr;      // (n_rows)
  float* m = nullptr;               // (n_rows) running maximum
  double* l = nullptr;              // (n_rows) running sum of exp(s - m)
  float* acc = nullptr;             // (n_rows, head_dim_v) running weighted sum of values
};

class ThreadPool;  // compute/cpu/thread_pool.h
class OpProfile;   // compute/op_profile.h

// The dispatch path a Context made with the default gets on this CPU, e.g. "avx512vnni":
// for reports that say which kernels produced a figure.
const char* default_simd_name();

class Context {
 public:
  explicit Context(int n_threads);
  // As above with an explicit dispatch path ("scalar", "avx2", "avx512", "avx512vnni", "amx";
  // "" = the default). A path this CPU lacks falls back to the best one below it.
  Context(int n_threads, std::string_view simd);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int n_threads() const;
  // The persistent pool (compute/cpu/thread_pool.h): parallel_for(n, fn(i)) hands items
  // out dynamically; run(fn(i, n)) calls fn once per share i < n_threads() (i indexes
  // per-share scratch; a share may run on any thread, never on two at once).
  ThreadPool& pool();
  const char* simd_name() const;  // the dispatch path in use, e.g. "avx512vnni"

  // Sizes scratch for products with up to max_tokens rows of max_cols columns.
  void reserve(int64_t max_tokens, int64_t max_cols);
  // Bytes of activation scratch held (matmul within reserve()'s sizes never grows it).
  size_t scratch_bytes() const;

  // Multiply-accumulates done so far by matmul() and attention_step() (q.k and p.v of the
  // visible keys): bench's GFLOP/s per test is 2 x the difference over the test.
  uint64_t macs() const;
  // Jobs the pool has handed to its workers so far (ThreadPool::jobs()): bench's jobs per
  // token, the count of fan-outs and waits a step pays whatever its arithmetic.
  uint64_t pool_jobs() const;
  // Times this context's products and activation quantizations into `profile` (null: off),
  // and lets the model's blocks time theirs (op_profile()).
  void set_op_profile(OpProfile* profile);
  OpProfile* op_profile() const;
  // The CPU's int8 dot-product ceiling on this path, measured now for about `seconds`
  // on every pool thread: int8 multiply-accumulates per second of a register-only
  // maddubs/madd loop (the instructions the quantized kernels use); 0 on the scalar path.
  double int8_peak_macs_per_second(double seconds);

  // y[t, r] = sum_k W[r, k] * x[t, k] for t < n_tokens, r < W.n_rows.
  // x: (n_tokens, W.n_cols) F32 row-major; y: (n_tokens, W.n_rows) F32 row-major.
  void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y);

  // y[i] = matmul(*w[i], x, n_tokens) for i < n (<= kMaxSharedProducts): products that share
  // their input (Q/K/V, gate/up), each bit-identical to its own matmul(). Up to
  // kSharedMaxTokens rows they run as one job of the pool over all their rows (one wait
  // instead of n), x quantized once per activation format; more rows, one by one.
  // REQUIRES: every w[i]->n_cols is equal.
  static constexpr int kMaxSharedProducts = 8;
  static constexpr int64_t kSharedMaxTokens = 16;
  void matmul_shared(const WeightView* const* w, float* const* y, int n, const float* x,
                     int64_t n_tokens);
  // y[i] = matmul(*w[i], x[i], n_tokens) for i < n (<= kMaxSharedProducts): products with
  // inputs of their own (a MoE step's expert downs), in one job as matmul_shared's, each
  // input quantized once however many products read it.
  void matmul_many(const WeightView* const* w, const float* const* x, float* const* y, int n,
                   int64_t n_tokens);

  // Per-group products of one stacked tensor: for g < n_groups, y_g = W_g . x_g with W_g
  // the rows [g * n_out, (g + 1) * n_out) of w (n_out = w.n_rows / n_groups), x_g the
  // (n_tokens, w.n_cols) block g of x and y_g the (n_tokens, n_out) block g of y. One job
  // of the pool over every group's rows (MLA's per-head products: one wait, not n_groups);
  // each y_g bit-identical to matmul(W_g, x_g, n_tokens).
  // REQUIRES: w.n_rows % n_groups == 0.
  void matmul_grouped(const WeightView& w, int64_t n_groups, const float* x, int64_t n_tokens,
                      float* y);
  // Where matmul_grouped's rows live, in floats: group g's token t reads w.n_cols values at
  // x + g * x_group + t * x_token and writes n_out at y + g * y_group + t * y_token (MLA's
  // heads, read and written in place inside each token's row of all heads).
  struct GroupedLayout {
    int64_t x_group, x_token, y_group, y_token;
  };
  void matmul_grouped(const WeightView& w, int64_t n_groups, const float* x, int64_t n_tokens,
                      float* y, const GroupedLayout& layout);

  // Two per-group products in a chain, for one token row x (w1.n_cols): for g < n_groups,
  // y1_g = W1_g . x, then y2_g = W2_g . y1_g[0..w2.n_cols), with W1_g and W2_g group g's
  // rows of w1 and w2 (n_groups blocks each), y1_g at y1 + g * y1_stride and y2_g at
  // y2 + g * y2_stride; and, when extra is not null, extra_y = *extra . x beside them. One
  // job over the groups (MLA's query per head: its q rows, then their absorption), each
  // output bit-identical to its own matmul().
  // REQUIRES: w1.n_rows % n_groups == w2.n_rows % n_groups == 0, w2.n_cols <= y1_stride,
  // extra->n_cols == w1.n_cols.
  void matmul_chained(const WeightView& w1, const WeightView& w2, int64_t n_groups, const float* x,
                      float* y1, int64_t y1_stride, float* y2, int64_t y2_stride,
                      const WeightView* extra, float* extra_y);

  // out[i, :] = dequantized row ids[i] of W (embedding lookup). out: (n_ids, W.n_cols).
  void get_rows(const WeightView& w, const int32_t* ids, int64_t n_ids, float* out);

  // ---- attention (flash-attention style; the loop over blocks is the caller's) ----

  // Widens n_rows rows of `width` cached values (one head, F16 or F32, rows src.stride
  // elements apart) to F32. out: (n_rows, width).
  void widen_rows(const KvRows& src, int64_t n_rows, int64_t width, float* out) const;
  // Widens n_keys <= kAttnMaxKeys cached keys of d elements to F32, transposed: out is
  // (d, kAttnMaxKeys), key j's element c at out[c * kAttnMaxKeys + j] (the scores then take
  // one element of many keys per instruction; columns past n_keys are left as they are).
  void widen_keys(const KvRows& src, int64_t n_keys, int64_t d, float* out) const;
  // One online-softmax step of rows.n_rows query rows against a block of n_keys keys
  // (see AttentionRows). keys_t: widen_keys()'s (head_dim, kAttnMaxKeys), its columns past
  // n_keys finite; values: n_keys rows of head_dim_v, widen_rows()'s F32 or the cache's
  // own rows (F16 widened on the fly: the same bits, without the pass over the block that
  // a step of few rows would not earn back).
  // REQUIRES: n_keys <= kAttnMaxKeys; the block starts at a position that is a multiple of
  // 8 (lanes of the row sums follow absolute positions, which keeps batch invariance).
  void attention_step(const AttentionRows& rows, const float* keys_t, const KvRows& values,
                      int64_t n_keys) const;

  // gate[i] = silu(gate[i]) * up[i] for i < n, with this context's instruction set (the
  // SIMD exp differs from std::exp by a few ulp; elementwise, so batch-invariant).
  void silu_mul(float* gate, const float* up, int64_t n) const;
  // gate[i] = gelu_tanh_fp16(gate[i]) * up[i] for i < n: the same bits on every instruction
  // set (one table lookup and one product; F16C rounds to the table's index from AVX2 up).
  void gelu_mul(float* gate, const float* up, int64_t n) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- F32 helpers (single-threaded, vectorisable; called per row) ----

// out = x / sqrt(mean(x^2) + eps) * w   (w may be null: no scale). out may alias x.
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);
// In-place numerically stable softmax over n values.
void softmax(float* x, int64_t n);
// out[0..k) = the indices of the k largest of x[0..n), largest first, the lower index on
// ties (MoE routing's order). REQUIRES: 0 < k <= n.
void top_k(const float* x, int64_t n, int64_t k, int32_t* out);
// Rotary embedding of one head vector of head_dim values at position pos, in place.
// neox=false rotates pairs (2i, 2i+1); neox=true rotates (i, i + n_rot/2).
// freq_scale/ext factors follow ggml's YaRN-free "rope" (llama3 scaling via freq_factors).
void rope(float* x, int64_t head_dim, int64_t n_rot, int64_t pos, float freq_base, float freq_scale,
          const float* freq_factors, bool neox);

// YaRN's blend of interpolated and original frequencies (ggml's rope with ext_factor != 0):
// dims below corr_lo keep their original frequency, dims above corr_hi are interpolated by
// freq_scale, a linear ramp in between; cos and sin are scaled by attn_factor (times
// 1 + 0.1 ln(1 / freq_scale) when ext_factor != 0). The default is plain RoPE.
struct Yarn {
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float corr_lo = 0.0f, corr_hi = 0.0f;  // correction dims (pair indices)
};
// ggml_rope_yarn_corr_dims: the dims where a wavelength spans beta_fast / beta_slow turns of
// the original context.
Yarn yarn(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
          float ext_factor, float attn_factor);
// rope() with YaRN: the rotated dims are x[0..n_rot).
void rope_yarn(float* x, int64_t n_rot, int64_t pos, float freq_base, float freq_scale,
               const float* freq_factors, const Yarn& y, bool neox);
// rope_yarn() in two steps, for many heads at one position: the angles once (cs: n_rot
// values, each pair's scaled cos then sin), then each head's rotation by them; bit for bit
// rope_yarn's result.
void rope_yarn_angles(int64_t n_rot, int64_t pos, float freq_base, float freq_scale,
                      const float* freq_factors, const Yarn& y, float* cs);
void rope_rotate(float* x, int64_t n_rot, const float* cs, bool neox);
void silu(float* x, int64_t n);  // x * sigmoid(x), in place
// gpt-oss's clamped SwiGLU, in place on gate: g = min(gate, limit), u = clamp(up, +-limit),
// gate = g * sigmoid(alpha * g) * (u + 1). gpt-oss's constants (llama.cpp's too) below.
void swiglu_oai(float* gate, const float* up, int64_t n, float alpha, float limit);
inline constexpr float kSwigluOaiAlpha = 1.702f;
inline constexpr float kSwigluOaiLimit = 7.0f;
void gelu_tanh(float* x, int64_t n);  // tanh approximation, in place
// As ggml's CPU GELU: input and result rounded through fp16 (its lookup table), so
// gemma-style models match llama.cpp's logits closely. x <= -10 -> 0, x >= 10 -> x.
void gelu_tanh_fp16(float* x, int64_t n);
// gelu_tanh_fp16's table: entry h (the bits of an fp16 value) = fp16(gelu(h)).
const float* gelu_fp16_table();
void add(float* y, const float* x, int64_t n);  // y += x
void mul(float* y, const float* x, int64_t n);  // y *= x (elementwise)
void scale(float* y, float s, int64_t n);       // y *= s
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace hypura::compute
