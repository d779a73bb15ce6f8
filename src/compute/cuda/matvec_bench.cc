// hypura_bench_cuda: decode matrix-vector products on the GPU at Llama-3-8B shapes, as GB/s
// of weights read and as a share of the device-to-device copy bandwidth measured in the
// same run (bytes read + bytes written over the time of a large cudaMemcpy).
//
// Each product is matvec() as the model will call it (activation quantization + kernel).
// Weights rotate among copies totalling >= 8x the L2 cache so every product reads from
// device memory; products run as a captured CUDA graph of kGraphCalls calls, the way
// decode steps will run, so launch gaps are not counted; the median of kReps replays.
//
// Usage: hypura_bench_cuda [--ncu] [--configs] [--batch N] [type ...]
//   (default types: Q4_K Q8_0 F16)
// --ncu: no timing; three plain launches (no graph) of each product (and with --batch of
//   each batched product), for Nsight Compute.
// --configs: also time each kernel configuration (matvec_impl.cuh) at every shape.
// --batch N: also time batched products of N tokens (2..16), with dp4a and, for the
//   formats that have one, on the tensor cores (matvec_mma_kernel) with L2 requests 0, 1,
//   2 and 4 groups ahead.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compute/cuda/attention.h"
#include "compute/cuda/device.h"
#include "compute/cuda/matvec.h"
#include "compute/cuda/matvec_impl_config.h"
#include "quant/fp16.h"
#include "quant/quant.h"

namespace {

using namespace hypura;
using namespace hypura::compute::cuda;

constexpr int kGraphCalls = 32;
constexpr int kReps = 15;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median milliseconds of `fn` (which enqueues work on `s`), timed with events.
template <typename Fn>
double median_ms(cudaStream_t s, int reps, Fn fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(a, s), "record");
    fn();
    check(cudaEventRecord(b, s), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double copy_bandwidth(cudaStream_t s) {
  const size_t bytes = size_t{2} << 30;
  auto src = DeviceBuffer::allocate(bytes), dst = DeviceBuffer::allocate(bytes);
  if (!src.is_ok() || !dst.is_ok()) return 0;
  check(cudaMemsetAsync(src->data(), 1, bytes, s), "memset");
  const double ms = median_ms(s, 10, [&] {
    check(cudaMemcpyAsync(dst->data(), src->data(), bytes, cudaMemcpyDeviceToDevice, s), "copy");
  });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
}

struct Shape {
  const char* name;
  int64_t n_rows, n_cols;
};

gguf::GgmlType parse_type(const std::string& s) {
  for (gguf::GgmlType t :
       {gguf::GgmlType::Q4_K, gguf::GgmlType::Q8_0, gguf::GgmlType::F16, gguf::GgmlType::Q6_K,
        gguf::GgmlType::Q5_K, gguf::GgmlType::Q4_0, gguf::GgmlType::BF16, gguf::GgmlType::F32,
        gguf::GgmlType::Q2_K, gguf::GgmlType::Q3_K, gguf::GgmlType::Q5_0, gguf::GgmlType::Q4_1,
        gguf::GgmlType::Q5_1}) {
    if (s == gguf::type_name(t)) return t;
  }
  std::fprintf(stderr, "unknown type %s\n", s.c_str());
  std::exit(2);
}

// Microseconds per call of fn(i) (which enqueues on s), from a captured graph of
// kGraphCalls calls, i = 0..kGraphCalls-1: the median of kReps replays.
template <typename Fn>
double graph_us(cudaStream_t s, Fn fn) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < kGraphCalls; ++i) fn(i);
  check(cudaStreamEndCapture(s, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  const double ms = median_ms(s, kReps, [&] { check(cudaGraphLaunch(exec, s), "launch"); });
  check(cudaStreamSynchronize(s), "sync");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms * 1e3 / kGraphCalls;
}

// Batched products of n_tok tokens at one shape with dp4a and on the tensor cores (ncu:
// three plain launches with the defaults, untimed).
void bench_batched(gguf::GgmlType type, const Shape& sh, int n_tok, double copy_bps, cudaStream_t s,
                   size_t bytes, const std::function<compute::WeightView(int)>& view, bool ncu) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(sh.n_cols * n_tok));
  for (float& v : x) v = dist(rng);
  auto dx = DeviceBuffer::allocate(x.size() * 4),
       dy = DeviceBuffer::allocate(sh.n_rows * n_tok * 4);
  auto scratch = DeviceBuffer::allocate(matvec_scratch_bytes(sh.n_cols * n_tok));
  if (!dx.is_ok() || !dy.is_ok() || !scratch.is_ok()) std::exit(1);
  check(cudaMemcpy(dx->data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), "h2d");
  const ActQ8 act = quantize_for(type, dx->as<float>(), sh.n_cols * n_tok, scratch->data(), s);
  if (ncu) {
    for (int i = 0; i < 3; ++i) matvec_batched(view(i), act, n_tok, dy->as<float>(), s);
    check(cudaStreamSynchronize(s), "sync");
    return;
  }
  const int saved_min = g_matvec_mma_min_tokens, saved_ahead = g_matvec_mma_prefetch;
  // dp4a (-1), then the tensor cores with L2 requests 0, 1, 2 and 4 groups ahead.
  for (int ahead : {-1, 0, 1, 2, 4}) {
    g_matvec_mma_min_tokens = ahead < 0 ? 17 : 2;
    g_matvec_mma_prefetch = std::max(ahead, 0);
    const double us =
        graph_us(s, [&](int i) { matvec_batched(view(i), act, n_tok, dy->as<float>(), s); });
    const double gbps = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
    char name[32];
    std::snprintf(name, sizeof name, ahead < 0 ? "dp4a" : "tensor, L2 +%d", ahead);
    std::printf("%-5s %-22s %2d tokens, %-14s kernel %8.2f us %6.0f GB/s %5.1f%%\n",
                gguf::type_name(type), sh.name, n_tok, name, us, gbps,
                100.0 * gbps * 1e9 / copy_bps);
  }
  g_matvec_mma_min_tokens = saved_min;
  g_matvec_mma_prefetch = saved_ahead;
}

void bench_one(gguf::GgmlType type, const Shape& sh, double copy_bps, cudaStream_t s, bool ncu,
               bool configs, int batch) {
  const size_t row = quant::row_size(type, sh.n_cols);
  const size_t bytes = row * static_cast<size_t>(sh.n_rows);
  // 64 distinct random rows, tiled over the matrix (HBM does not compress cudaMalloc memory).
  constexpr int kDistinct = 64;
  std::vector<uint8_t> rows(row * kDistinct);
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> wf(static_cast<size_t>(sh.n_cols));
  for (int r = 0; r < kDistinct; ++r) {
    for (float& v : wf) v = dist(rng);
    quant::quantize_row_ref(type, wf.data(), rows.data() + r * row, sh.n_cols);
  }
  const int n_copies = static_cast<int>(std::max<size_t>(1, (size_t{512} << 20) / bytes + 1));
  std::vector<DeviceBuffer> copies;
  for (int c = 0; c < n_copies; ++c) {
    auto b = DeviceBuffer::allocate(bytes);
    if (!b.is_ok()) {
      std::fprintf(stderr, "%s\n", b.status().message().c_str());
      std::exit(1);
    }
    for (int64_t r = 0; r < sh.n_rows; r += kDistinct) {
      const int64_t n = std::min<int64_t>(kDistinct, sh.n_rows - r);
      check(cudaMemcpy(b->as<uint8_t>() + r * row, rows.data(), n * row, cudaMemcpyHostToDevice),
            "h2d");
    }
    copies.push_back(std::move(*b));
  }
  std::vector<float> x(static_cast<size_t>(sh.n_cols));
  for (float& v : x) v = dist(rng) * 20.0f;
  auto dx = DeviceBuffer::allocate(x.size() * 4), dy = DeviceBuffer::allocate(sh.n_rows * 4);
  auto scratch = DeviceBuffer::allocate(matvec_scratch_bytes(sh.n_cols));
  if (!dx.is_ok() || !dy.is_ok() || !scratch.is_ok()) std::exit(1);
  check(cudaMemcpy(dx->data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), "h2d");

  const ActQ8 act = quantize_for(type, dx->as<float>(), sh.n_cols, scratch->data(), s);
  check(cudaStreamSynchronize(s), "sync");
  auto view = [&](int i) {
    return compute::WeightView{copies[i % n_copies].data(), type, sh.n_cols, sh.n_rows};
  };
  if (ncu) {
    for (int i = 0; i < 3; ++i) matvec_quantized(view(i), act, dy->as<float>(), s);
    check(cudaStreamSynchronize(s), "sync");
    if (batch > 1) bench_batched(type, sh, batch, copy_bps, s, bytes, view, true);
    return;
  }
  // Whole matvec() (quantize + product), then the product alone on pre-quantized x.
  const double us_full = graph_us(
      s, [&](int i) { matvec(view(i), dx->as<float>(), dy->as<float>(), scratch->data(), s); });
  const double us_kernel =
      graph_us(s, [&](int i) { matvec_quantized(view(i), act, dy->as<float>(), s); });
  auto gbps = [&](double us) { return static_cast<double>(bytes) / (us * 1e-6) / 1e9; };
  if (batch > 1) bench_batched(type, sh, batch, copy_bps, s, bytes, view, false);
  if (configs) {
    const char* names[] = {"1 row/warp", "2 rows/warp", "split over 2 warps"};
    for (int c = 0; c < 3; ++c) {
      g_matvec_config_override = c;
      const double us =
          graph_us(s, [&](int i) { matvec_quantized(view(i), act, dy->as<float>(), s); });
      std::printf("%-5s %-22s config %-18s kernel %8.2f us %6.0f GB/s %5.1f%%\n",
                  gguf::type_name(type), sh.name, names[c], us, gbps(us),
                  100.0 * gbps(us) * 1e9 / copy_bps);
    }
    g_matvec_config_override = -1;
  }
  std::printf(
      "%-5s %-22s %8.1f MB | matvec %8.2f us %6.0f GB/s %5.1f%% | kernel %8.2f us %6.0f GB/s "
      "%5.1f%%\n",
      gguf::type_name(type), sh.name, bytes / 1e6, us_full, gbps(us_full),
      100.0 * gbps(us_full) * 1e9 / copy_bps, us_kernel, gbps(us_kernel),
      100.0 * gbps(us_kernel) * 1e9 / copy_bps);
}

// Decode attention at Llama-3-8B's shape (32 q heads, 8 kv heads, head_dim 128) over an
// F16 cache of n_kv positions: GB/s of K and V read.
void bench_attention(int64_t n_kv, double copy_bps, cudaStream_t s) {
  const int64_t n_head = 32, n_head_kv = 8, hd = 128, width = n_head_kv * hd;
  const size_t kv_bytes = static_cast<size_t>(n_kv * width) * 2;
  const int n_copies =
      static_cast<int>(std::max<size_t>(1, (size_t{512} << 20) / (2 * kv_bytes) + 1));
  std::vector<uint16_t> host(static_cast<size_t>(n_kv * width));
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& h : host) h = quant::f32_to_fp16(dist(rng));
  std::vector<DeviceBuffer> ks, vs;
  for (int c = 0; c < n_copies; ++c) {
    auto k = DeviceBuffer::allocate(kv_bytes), v = DeviceBuffer::allocate(kv_bytes);
    if (!k.is_ok() || !v.is_ok()) std::exit(1);
    check(cudaMemcpy(k->data(), host.data(), kv_bytes, cudaMemcpyHostToDevice), "h2d");
    check(cudaMemcpy(v->data(), host.data(), kv_bytes, cudaMemcpyHostToDevice), "h2d");
    ks.push_back(std::move(*k));
    vs.push_back(std::move(*v));
  }
  std::vector<float> qh(static_cast<size_t>(n_head * hd));
  for (float& q : qh) q = dist(rng);
  auto q = DeviceBuffer::allocate(qh.size() * 4), out = DeviceBuffer::allocate(qh.size() * 4);
  auto scratch = DeviceBuffer::allocate(attention_scratch_bytes(n_head, n_head_kv, hd, n_kv));
  if (!q.is_ok() || !out.is_ok() || !scratch.is_ok()) std::exit(1);
  check(cudaMemcpy(q->data(), qh.data(), qh.size() * 4, cudaMemcpyHostToDevice), "h2d");
  const double us = graph_us(s, [&](int i) {
    AttnDecodeArgs a;
    a.q = q->as<float>();
    a.k = ks[i % n_copies].as<uint16_t>();
    a.v = vs[i % n_copies].as<uint16_t>();
    a.out = out->as<float>();
    a.n_head = n_head;
    a.n_head_kv = n_head_kv;
    a.head_dim = a.head_dim_v = hd;
    a.k_stride = a.v_stride = width;
    a.kv_first = 0;
    a.kv_end = n_kv;
    a.kq_scale = 0.088f;
    attention_decode(a, scratch->data(), s);
  });
  const double gbps = 2.0 * kv_bytes / (us * 1e-6) / 1e9;
  std::printf(
      "attention decode 32/8 heads x 128, %6lld keys: %8.2f us %6.0f GB/s of K+V %5.1f%% of copy\n",
      static_cast<long long>(n_kv), us, gbps, 100.0 * gbps * 1e9 / copy_bps);
}

}  // namespace

int main(int argc, char** argv) {
  if (device_count() == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  auto info = device_info(0);
  if (!info.is_ok()) {
    std::fprintf(stderr, "%s\n", info.status().message().c_str());
    return 1;
  }
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  const double copy_bps = copy_bandwidth(s);
  std::printf("device %s: %d SMs, %.1f GiB, L2 %.0f MiB, cc %d.%d\n", info->name.c_str(),
              info->n_sm, info->total_bytes / 1073741824.0, info->l2_bytes / 1048576.0,
              info->cc_major, info->cc_minor);
  std::printf("device-to-device copy (2 GiB, read + write): %.0f GB/s\n", copy_bps / 1e9);
  std::vector<gguf::GgmlType> types;
  bool ncu = false, configs = false;
  int batch = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      batch = std::atoi(argv[++i]);
      if (batch < 1 || batch > kMatvecMaxTokens) {
        std::fprintf(stderr, "--batch takes 1..%d\n", kMatvecMaxTokens);
        return 2;
      }
    } else if (std::strcmp(argv[i], "--configs") == 0) {
      configs = true;
    } else if (std::strcmp(argv[i], "--ncu") == 0) {
      ncu = true;
    } else {
      types.push_back(parse_type(argv[i]));
    }
  }
  if (types.empty()) types = {gguf::GgmlType::Q4_K, gguf::GgmlType::Q8_0, gguf::GgmlType::F16};
  const Shape shapes[] = {{"attn_q/o 4096x4096", 4096, 4096},
                          {"ffn_gate/up 14336x4096", 14336, 4096},
                          {"ffn_down 4096x14336", 4096, 14336},
                          {"output 128256x4096", 128256, 4096}};
  for (gguf::GgmlType t : types) {
    for (const Shape& sh : shapes) bench_one(t, sh, copy_bps, s, ncu, configs, batch);
  }
  if (!ncu) {
    for (int64_t n_kv : {512, 4096, 16384, 65536}) bench_attention(n_kv, copy_bps, s);
  }
  cudaStreamDestroy(s);
  return 0;
}
