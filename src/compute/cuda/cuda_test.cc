// The CUDA kernels against their CPU twins on random data (fixed seeds), with named
// tolerances on the relative L2 error ||gpu - cpu|| / ||cpu||. Every output is poisoned
// (NaN) before a kernel runs, so an element left unwritten fails. Without a GPU every
// test skips.
//
// Tolerances:
//   kQuantExact   activation quants and scales: identical bytes (same float operations).
//   kMatvecRelL2  the 8-bit integer dots are exact on both sides; only the order of the
//                 float sums over chunks / blocks differs (about sqrt(n_blocks) ulps).
//   kFloatRelL2   elementwise float ops: same operations, libm vs CUDA exp/tanh/sin/cos
//                 (a few ulps).
//   kAttnRelL2    attention: a different summation order (segments, warps) and float
//                 instead of the CPU's double softmax sum.
//   kGemmRelL2    prefill products on F16 operands (weights dequantized to F16, the CPU's
//                 8-bit activations widened to F16; F32 accumulation) against the CPU's
//                 matmul: two F16 roundings (2^-12 relative) per term, averaged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compute/compute.h"
#include "compute/cuda/attention.h"
#include "compute/cuda/binary.h"
#include "compute/cuda/dequant.h"
#include "compute/cuda/device.h"
#include "compute/cuda/expert_gemm.h"
#include "compute/cuda/fused.h"
#include "compute/cuda/gemm.h"
#include "compute/cuda/matvec.h"
#include "compute/cuda/matvec_impl_config.h"
#include "compute/cuda/moe.h"
#include "compute/cuda/norm.h"
#include "compute/cuda/quantize.h"
#include "compute/cuda/rope.h"
#include "compute/cuda/softmax.h"
#include "compute/cuda/strided.h"
#include "compute/cuda/unary.h"
#include "quant/fp16.h"
#include "quant/quant.h"

namespace hypura::compute::cuda {
namespace {

using gguf::GgmlType;

constexpr double kMatvecRelL2 = 1e-5;
constexpr double kFloatRelL2 = 1e-6;
constexpr double kAttnRelL2 = 1e-5;
constexpr double kGemmRelL2 = 2e-3;

const GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                              GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                              GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                              GgmlType::Q6_K, GgmlType::MXFP4};

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// n_rows rows of n_cols random values (std 0.05) quantized to `type` with the reference
// quantizer; *seed advances by one per row.
std::vector<uint8_t> random_weights(GgmlType type, int64_t n_rows, int64_t n_cols, uint32_t* seed) {
  const size_t row = quant::row_size(type, n_cols);
  std::vector<uint8_t> w(row * n_rows);
  for (int64_t r = 0; r < n_rows; ++r) {
    const std::vector<float> wf = random_floats(n_cols, (*seed)++, 0.05f);
    quant::quantize_row_ref(type, wf.data(), w.data() + r * row, n_cols);
  }
  return w;
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_TRUE(select_device(0));
    auto s = Stream::create();
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    stream_ = std::move(*s);
  }

  // A device copy of host bytes.
  DeviceBuffer upload(const void* src, size_t bytes) {
    auto b = DeviceBuffer::allocate(bytes);
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    EXPECT_TRUE(copy_to_device(b->data(), src, bytes));
    return std::move(*b);
  }
  template <typename T>
  DeviceBuffer upload(const std::vector<T>& v) {
    return upload(v.data(), v.size() * sizeof(T));
  }
  // A device buffer of n floats, every byte 0xFF (NaN).
  DeviceBuffer poisoned(size_t n) {
    std::vector<uint8_t> nan(n * sizeof(float), 0xFF);
    return upload(nan.data(), nan.size());
  }
  std::vector<float> download(const DeviceBuffer& b, size_t n) {
    EXPECT_TRUE(stream_.synchronize());
    std::vector<float> v(n);
    EXPECT_TRUE(copy_to_host(v.data(), b.data(), n * sizeof(float)));
    return v;
  }

  Stream stream_;
};

TEST_F(CudaTest, DeviceInfoAndOutOfMemoryIsAStatus) {
  auto info = device_info(0);
  ASSERT_TRUE(info.is_ok()) << info.status().message();
  EXPECT_FALSE(info->name.empty());
  EXPECT_GT(info->total_bytes, 0u);
  EXPECT_GT(info->n_sm, 0);
  auto huge = DeviceBuffer::allocate(size_t{1} << 52);  // 4 PiB
  ASSERT_FALSE(huge.is_ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("MiB requested"), std::string::npos);
  auto small = DeviceBuffer::allocate(1 << 20);  // the failure left no sticky error
  EXPECT_TRUE(small.is_ok()) << small.status().message();
  EXPECT_TRUE(stream_.synchronize());
}

// Activation quants: bit-identical to the CPU's, ties of |max| included.
TEST_F(CudaTest, ActivationQuantizationMatchesCpuExactly) {
  const int64_t n = 4096;
  std::vector<float> x = random_floats(n, 7);
  x[3] = 2.5f, x[9] = -2.5f;  // a tie of |max| inside one 32-block and one 256-block
  for (int i = 256; i < 512; ++i) x[i] = 0.0f;  // an all-zero block
  DeviceBuffer dx = upload(x);
  auto scratch = DeviceBuffer::allocate(matvec_scratch_bytes(n));
  ASSERT_TRUE(scratch.is_ok());
  const ActQ8Layout l = act_q8_layout(n);
  for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_1, ActFormat::kQ8_K}) {
    quantize_act(f, dx.as<float>(), n, scratch->data(), stream_.handle());
    ASSERT_TRUE(stream_.synchronize());
    std::vector<uint8_t> got(l.total);
    ASSERT_TRUE(copy_to_host(got.data(), scratch->data(), l.total));
    const auto* q = reinterpret_cast<const int8_t*>(got.data() + l.q);
    const auto* d = reinterpret_cast<const float*>(got.data() + l.d);
    const auto* s = reinterpret_cast<const float*>(got.data() + l.s);
    int bad = 0;
    if (f == ActFormat::kQ8_K) {
      std::vector<quant::BlockQ8_K> ref(n / 256);
      quant::quantize_row_q8_k(x.data(), ref.data(), n);
      for (int64_t b = 0; b < n / 256; ++b) {
        bad += std::memcmp(&ref[b].d, &d[b], 4) != 0;
        bad += std::memcmp(ref[b].qs, q + b * 256, 256) != 0;
      }
    } else {
      std::vector<quant::BlockQ8_1> ref1(n / 32);
      std::vector<quant::BlockQ8_0> ref0(n / 32);
      quant::quantize_row_q8_1(x.data(), ref1.data(), n);
      quant::quantize_row_q8_0(x.data(), ref0.data(), n);
      for (int64_t b = 0; b < n / 32; ++b) {
        const bool q81 = f == ActFormat::kQ8_1;
        const int8_t* rq = q81 ? ref1[b].qs : ref0[b].qs;
        const float rd = quant::fp16_to_f32(q81 ? ref1[b].d : ref0[b].d);
        bad += std::memcmp(rq, q + b * 32, 32) != 0;
        bad += std::memcmp(&rd, &d[b], 4) != 0;
        if (q81) {
          const float rs = quant::fp16_to_f32(ref1[b].s);
          bad += std::memcmp(&rs, &s[b], 4) != 0;
        }
      }
    }
    EXPECT_EQ(bad, 0) << "format " << static_cast<int>(f);
  }
}

struct MatvecShape {
  int64_t n_rows, n_cols;
  int config;  // g_matvec_config_override: -1 the shape policy, 0..2 a forced kernel configuration
};

// GPU y = W x against the CPU's scalar matmul (the reference twins) for every weight type,
// in every kernel configuration.
TEST_F(CudaTest, MatvecMatchesCpuForEveryType) {
  Context cpu(1, "scalar");
  uint32_t seed = 100;
  for (GgmlType type : kAllTypes) {
    // 67 and 130 rows: not multiples of the rows per thread block; 768 and 2304 columns:
    // 3 and 9 super-blocks (not a multiple of the 32 lanes' items); each in every
    // configuration. 12289 rows and 33 x 8192: what the shape policy picks for tall and
    // for short wide matrices.
    std::vector<MatvecShape> shapes;
    for (int config = 0; config < 3; ++config) {
      shapes.push_back({67, 768, config});
      shapes.push_back({130, 2304, config});
      if (quant::block_size(type) == 1) shapes.push_back({33, 100, config});  // 1-element path
    }
    shapes.push_back({12289, 256, -1});
    shapes.push_back({33, 8192, -1});
    if (type == GgmlType::MXFP4) {  // gpt-oss's rows (1530 bytes) and odd-length ones
      for (int config = 0; config < 3; ++config) shapes.push_back({67, 2880, config});
      shapes.push_back({45, 2912, -1});
    }
    for (const MatvecShape& sh : shapes) {
      SCOPED_TRACE(std::string(gguf::type_name(type)) + " " + std::to_string(sh.n_rows) + "x" +
                   std::to_string(sh.n_cols) + " config " + std::to_string(sh.config));
      const std::vector<uint8_t> w = random_weights(type, sh.n_rows, sh.n_cols, &seed);
      const std::vector<float> x = random_floats(sh.n_cols, seed++);
      std::vector<float> want(sh.n_rows);
      cpu.matmul(WeightView{w.data(), type, sh.n_cols, sh.n_rows}, x.data(), 1, want.data());

      DeviceBuffer dw = upload(w), dx = upload(x), dy = poisoned(sh.n_rows);
      auto scratch = DeviceBuffer::allocate(matvec_scratch_bytes(sh.n_cols));
      ASSERT_TRUE(scratch.is_ok());
      g_matvec_config_override = sh.config;
      matvec(WeightView{dw.data(), type, sh.n_cols, sh.n_rows}, dx.as<float>(), dy.as<float>(),
             scratch->data(), stream_.handle());
      g_matvec_config_override = -1;
      const std::vector<float> got = download(dy, sh.n_rows);
      EXPECT_LE(rel_l2(got, want), kMatvecRelL2);
    }
  }
}

TEST_F(CudaTest, RmsNormMatchesCpu) {
  // A few 4096-wide rows (a block per 256 values, 16-byte loads), many (a block per row),
  // widths that are no multiple of 256 (a partial last block: gpt-oss's 2880; 1000), and
  // one that is no multiple of 4 (scalar loads).
  struct Shape {
    int64_t rows, n;
  };
  for (const Shape sh :
       {Shape{5, 4096}, Shape{20, 4096}, Shape{3, 2880}, Shape{3, 1000}, Shape{2, 999}}) {
    const int64_t rows = sh.rows, n = sh.n;
    const std::vector<float> x = random_floats(rows * n, 1), w = random_floats(n, 2);
    for (bool with_w : {true, false}) {
      std::vector<float> want(rows * n);
      for (int64_t r = 0; r < rows; ++r) {
        compute::rms_norm(x.data() + r * n, with_w ? w.data() : nullptr, n, 1e-5f,
                          want.data() + r * n);
      }
      DeviceBuffer dx = upload(x), dw = upload(w), dy = poisoned(rows * n);
      cuda::rms_norm(dx.as<float>(), with_w ? dw.as<float>() : nullptr, rows, n, 1e-5f,
                     dy.as<float>(), stream_.handle());
      EXPECT_LE(rel_l2(download(dy, rows * n), want), kFloatRelL2) << rows << " x " << n;
    }
  }
}

TEST_F(CudaTest, SoftmaxMatchesCpuWithMaskedEntries) {
  const int64_t rows = 4, n = 1000;
  std::vector<float> x = random_floats(rows * n, 3, 4.0f);
  for (int64_t i = 0; i < n; i += 3) x[i] = -INFINITY;   // row 0 partly masked
  for (int64_t i = 0; i < n; ++i) x[n + i] = -INFINITY;  // row 1 fully masked
  std::vector<float> want = x;
  for (int64_t r = 0; r < rows; ++r) compute::softmax(want.data() + r * n, n);
  DeviceBuffer dx = upload(x);
  cuda::softmax(dx.as<float>(), rows, n, stream_.handle());
  EXPECT_LE(rel_l2(download(dx, rows * n), want), kFloatRelL2);
}

TEST_F(CudaTest, RopeMatchesCpuNormalAndNeox) {
  const int64_t n_tok = 3, n_head = 4, head_dim = 128;
  const std::vector<int32_t> pos = {0, 17, 30000};
  const std::vector<float> x = random_floats(n_tok * n_head * head_dim, 4);
  std::vector<float> factors(head_dim / 4);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.25f * static_cast<float>(i % 5);
  for (bool neox : {false, true}) {
    for (int variant = 0; variant < 3; ++variant) {
      // Full rotation; partial (glm4moe's NeoX first half); partial with frequency factors.
      const bool with_ff = variant == 2;
      const int64_t n_rot = variant == 0 ? head_dim : head_dim / 2;
      std::vector<float> want = x;
      for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t h = 0; h < n_head; ++h) {
          compute::rope(want.data() + (t * n_head + h) * head_dim, head_dim, n_rot, pos[t],
                        500000.0f, 0.5f, with_ff ? factors.data() : nullptr, neox);
        }
      }
      DeviceBuffer dx = upload(x), dpos = upload(pos), dff = upload(factors);
      RopeParams p;
      p.head_dim = head_dim;
      p.n_rot = n_rot;
      p.freq_base = 500000.0f;
      p.freq_scale = 0.5f;
      p.freq_factors = with_ff ? dff.as<float>() : nullptr;
      p.neox = neox;
      cuda::rope(dx.as<float>(), n_tok, n_head, n_head * head_dim, dpos.as<int32_t>(), p,
                 stream_.handle());
      EXPECT_LE(rel_l2(download(dx, x.size()), want), kFloatRelL2) << neox << variant;
    }
  }
}

TEST_F(CudaTest, UnaryAndBinaryMatchCpu) {
  const int64_t n = 10000;
  const std::vector<float> x = random_floats(n, 5, 4.0f), y = random_floats(n, 6);
  struct Case {
    UnaryOp op;
    void (*cpu)(float*, int64_t);
  };
  for (const Case& c :
       {Case{UnaryOp::kSilu, compute::silu}, Case{UnaryOp::kGeluTanh, compute::gelu_tanh},
        Case{UnaryOp::kGeluTanhFp16, compute::gelu_tanh_fp16}}) {
    std::vector<float> want = x;
    c.cpu(want.data(), n);
    DeviceBuffer dx = upload(x);
    unary(c.op, dx.as<float>(), n, stream_.handle());
    EXPECT_LE(rel_l2(download(dx, n), want), kFloatRelL2) << static_cast<int>(c.op);
  }
  std::vector<float> want_add = y, want_mul = y, want_scale = y;
  compute::add(want_add.data(), x.data(), n);
  compute::mul(want_mul.data(), x.data(), n);
  compute::scale(want_scale.data(), 0.37f, n);
  DeviceBuffer dx = upload(x), da = upload(y), dm = upload(y), ds = upload(y);
  cuda::add(da.as<float>(), dx.as<float>(), n, stream_.handle());
  cuda::mul(dm.as<float>(), dx.as<float>(), n, stream_.handle());
  cuda::scale(ds.as<float>(), 0.37f, n, stream_.handle());
  EXPECT_EQ(rel_l2(download(da, n), want_add), 0.0);  // one IEEE operation: exact
  EXPECT_EQ(rel_l2(download(dm, n), want_mul), 0.0);
  EXPECT_EQ(rel_l2(download(ds, n), want_scale), 0.0);
}

// The CPU's attention math for one token's queries q (n_head, head_dim) over F16 cache rows
// [first, end) (width n_head_kv * head_dim): softmax of scaled dots, weighted sum of V.
// head_dim_v (0: head_dim) values per head, rows v_width (0: the keys' width) apart.
std::vector<float> attention_reference(const float* q, const std::vector<uint16_t>& k,
                                       const std::vector<uint16_t>& v, int64_t n_head,
                                       int64_t n_head_kv, int64_t head_dim, int64_t first,
                                       int64_t end, float kq_scale, int64_t head_dim_v = 0,
                                       int64_t v_width = 0) {
  const int64_t width = n_head_kv * head_dim, group = n_head / n_head_kv, n_kv = end - first;
  const int64_t hdv = head_dim_v > 0 ? head_dim_v : head_dim, vw = v_width > 0 ? v_width : width;
  std::vector<float> out(n_head * hdv, 0.0f), p(n_kv);
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t kvh = h / group;
    for (int64_t j = 0; j < n_kv; ++j) {
      float dot = 0.0f;
      for (int64_t d = 0; d < head_dim; ++d) {
        dot +=
            q[h * head_dim + d] * quant::fp16_to_f32(k[(first + j) * width + kvh * head_dim + d]);
      }
      p[j] = dot * kq_scale;
    }
    compute::softmax(p.data(), n_kv);
    for (int64_t j = 0; j < n_kv; ++j) {
      for (int64_t d = 0; d < hdv; ++d) {
        out[h * hdv + d] += p[j] * quant::fp16_to_f32(v[(first + j) * vw + kvh * hdv + d]);
      }
    }
  }
  return out;
}

// The fields the decode and prefill attention arguments share: buffers and the head shape
// (head_dim == head_dim_v, K and V rows `width` halves apart).
template <class Args>
void attention_shape(Args& a, const DeviceBuffer& q, const DeviceBuffer& k, const DeviceBuffer& v,
                     const DeviceBuffer& out, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                     int64_t width, float kq_scale) {
  a.q = q.as<float>();
  a.k = k.as<uint16_t>();
  a.v = v.as<uint16_t>();
  a.out = out.as<float>();
  a.n_head = n_head;
  a.n_head_kv = n_head_kv;
  a.head_dim = a.head_dim_v = head_dim;
  a.k_stride = a.v_stride = width;
  a.kq_scale = kq_scale;
}

std::vector<uint16_t> to_fp16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = quant::f32_to_fp16(x[i]);
  return h;
}

// Decode attention over an F16 cache against the CPU's math (softmax of scaled dots,
// weighted sum of widened V), GQA and a window that starts past position 0.
TEST_F(CudaTest, AttentionDecodeMatchesCpu) {
  struct Case {
    int64_t n_head, n_head_kv, head_dim, kv_first, kv_end;
  };
  // GQA groups of 4, 1, 2, 12 (two or more blocks of q heads), 3 and 8; head_dim 128, 64, 256
  // and 96 (lanes per key not a power of two); one key; windows not starting at 0; short
  // contexts (shortened segments, q heads split over blocks) and long ones (8 q heads a block).
  for (const Case& c : {Case{8, 2, 128, 100, 1000}, Case{4, 4, 64, 0, 1}, Case{2, 1, 256, 0, 300},
                        Case{32, 8, 128, 0, 4096}, Case{12, 1, 128, 0, 700}, Case{6, 2, 96, 5, 333},
                        Case{32, 8, 128, 0, 20000}, Case{16, 2, 128, 0, 20000}}) {
    SCOPED_TRACE(std::to_string(c.head_dim) + " " + std::to_string(c.kv_end));
    const int64_t n_ctx = c.kv_end, width = c.n_head_kv * c.head_dim;
    const std::vector<float> q = random_floats(c.n_head * c.head_dim, 8);
    const std::vector<float> kf = random_floats(n_ctx * width, 9),
                             vf = random_floats(n_ctx * width, 10);
    const std::vector<uint16_t> k = to_fp16(kf), v = to_fp16(vf);
    const float kq_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

    const int64_t n_kv = c.kv_end - c.kv_first;
    const std::vector<float> want = attention_reference(q.data(), k, v, c.n_head, c.n_head_kv,
                                                        c.head_dim, c.kv_first, c.kv_end, kq_scale);
    DeviceBuffer dq = upload(q), dk = upload(k), dv = upload(v), dout = poisoned(want.size());
    auto scratch =
        DeviceBuffer::allocate(attention_scratch_bytes(c.n_head, c.n_head_kv, c.head_dim, n_kv));
    ASSERT_TRUE(scratch.is_ok());
    AttnDecodeArgs a;
    attention_shape(a, dq, dk, dv, dout, c.n_head, c.n_head_kv, c.head_dim, width, kq_scale);
    a.kv_first = c.kv_first;
    a.kv_end = c.kv_end;
    attention_decode(a, scratch->data(), stream_.handle());
    EXPECT_LE(rel_l2(download(dout, want.size()), want), kAttnRelL2);
    // The replayable form (a captured decode step): the position on the device, the launch
    // sized for more keys than are visible; a window when the case starts past 0.
    const std::vector<int32_t> pos = {static_cast<int32_t>(c.kv_end - 1)};
    DeviceBuffer dpos = upload(pos), dout2 = poisoned(want.size());
    auto scratch2 = DeviceBuffer::allocate(
        attention_scratch_bytes(c.n_head, c.n_head_kv, c.head_dim, 2 * c.kv_end));
    ASSERT_TRUE(scratch2.is_ok());
    a.out = dout2.as<float>();
    a.pos = dpos.as<int32_t>();
    a.n_swa = c.kv_first > 0 ? c.kv_end - c.kv_first : 0;
    a.max_kv = 2 * c.kv_end;
    a.kv_first = a.kv_end = -7;  // ignored
    attention_decode(a, scratch2->data(), stream_.handle());
    EXPECT_LE(rel_l2(download(dout2, want.size()), want), kAttnRelL2) << "replayable";
  }
}

// A decode step of several sequences in one launch (each its own caches, position and
// window) and their cache writes in one: every sequence's output bit for bit its launch
// alone in the same replayable shape, and the stored rows as store_kv_f16's.
TEST_F(CudaTest, AttentionOfSeveralSequencesAsAlone) {
  const int64_t n_head = 8, n_head_kv = 2, head_dim = 128, width = n_head_kv * head_dim;
  const int64_t max_kv = 2048, qw = n_head * head_dim;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int n : {1, 3, 16}) {
    for (int64_t n_swa : {int64_t{0}, int64_t{100}}) {
      SCOPED_TRACE(std::to_string(n) + " sequences, window " + std::to_string(n_swa));
      std::vector<int32_t> pos(n);
      std::vector<DeviceBuffer> kc, vc, kc1, vc1;
      AttnSeqs seqs, alone;
      seqs.n = n;
      seqs.q_stride = qw;
      seqs.out_stride = qw;
      for (int i = 0; i < n; ++i) {
        pos[i] = static_cast<int32_t>((i * 397 + 1) % max_kv);
        const std::vector<uint16_t> k = to_fp16(random_floats(max_kv * width, 40 + i)),
                                    v = to_fp16(random_floats(max_kv * width, 70 + i));
        kc.push_back(upload(k));
        vc.push_back(upload(v));
        kc1.push_back(upload(k));
        vc1.push_back(upload(v));
        seqs.k[i] = kc.back().as<uint16_t>();
        seqs.v[i] = vc.back().as<uint16_t>();
      }
      const std::vector<float> q = random_floats(n * qw, 11), kn = random_floats(n * width, 12),
                               vn = random_floats(n * width, 13);
      DeviceBuffer dq = upload(q), dkn = upload(kn), dvn = upload(vn), dpos = upload(pos),
                   dout = poisoned(n * qw), dout1 = poisoned(n * qw);
      auto scratch =
          DeviceBuffer::allocate(n * attention_scratch_bytes(n_head, n_head_kv, head_dim, max_kv));
      ASSERT_TRUE(scratch.is_ok());
      store_kv_f16_seqs(dkn.as<float>(), dvn.as<float>(), width, width, dpos.as<int32_t>(), seqs,
                        stream_.handle());
      AttnDecodeArgs a;
      attention_shape(a, dq, kc[0], vc[0], dout, n_head, n_head_kv, head_dim, width, kq_scale);
      a.pos = dpos.as<int32_t>();
      a.n_swa = n_swa;
      a.max_kv = max_kv;
      attention_decode_seqs(a, seqs, scratch->data(), stream_.handle());
      for (int i = 0; i < n; ++i) {
        store_kv_f16(dkn.as<float>() + i * width, dvn.as<float>() + i * width, 1, width, width,
                     dpos.as<int32_t>() + i, kc1[i].as<uint16_t>(), vc1[i].as<uint16_t>(),
                     stream_.handle());
        AttnDecodeArgs b = a;
        b.k = kc1[i].as<uint16_t>();
        b.v = vc1[i].as<uint16_t>();
        b.q = dq.as<float>() + i * qw;
        b.out = dout1.as<float>() + i * qw;
        b.pos = dpos.as<int32_t>() + i;
        attention_decode(b, scratch->data(), stream_.handle());
      }
      EXPECT_EQ(download(dout, n * qw), download(dout1, n * qw));
      for (int i = 0; i < n; ++i) {
        std::vector<uint16_t> got(max_kv * width), want(max_kv * width);
        ASSERT_TRUE(copy_to_host(got.data(), kc[i].data(), got.size() * 2));
        ASSERT_TRUE(copy_to_host(want.data(), kc1[i].data(), want.size() * 2));
        EXPECT_EQ(got, want) << "keys of " << i;
        ASSERT_TRUE(copy_to_host(got.data(), vc[i].data(), got.size() * 2));
        ASSERT_TRUE(copy_to_host(want.data(), vc1[i].data(), want.size() * 2));
        EXPECT_EQ(got, want) << "values of " << i;
      }
    }
  }
}

// A draft tree's row (AttnDecodeArgs::branch): its keys past the branch's base read from
// the branch's slots give, bit for bit, the attention over the same keys in the slots of
// their positions (the branch decoded alone), inside a segment and across one, with and
// without a window.
TEST_F(CudaTest, AttentionOverABranchAsOverItsKeysInPlace) {
  const int64_t n_head = 8, n_head_kv = 2, head_dim = 64, width = n_head_kv * head_dim;
  const int64_t n_ctx = 600, qw = n_head * head_dim;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const std::vector<float> q = random_floats(qw, 21);
  const std::vector<uint16_t> k = to_fp16(random_floats(n_ctx * width, 22)),
                              v = to_fp16(random_floats(n_ctx * width, 23));
  DeviceBuffer dq = upload(q), din_place_k = upload(k), din_place_v = upload(v);
  for (const int64_t base : {int64_t{70}, int64_t{250}}) {
    for (const int64_t n_swa : {int64_t{0}, int64_t{40}}) {
      SCOPED_TRACE("base " + std::to_string(base) + ", window " + std::to_string(n_swa));
      // The branch's 9 keys (positions base..base+8) sit in the tree's slots base + 3 * d
      // (other nodes between them), their rows in place in the reference.
      const int64_t depth = 8, pos = base + depth;
      std::vector<int32_t> branch(depth + 1);
      std::vector<uint16_t> kt = to_fp16(random_floats(n_ctx * width, 24)), vt = kt;
      std::copy_n(k.begin(), base * width, kt.begin());
      std::copy_n(v.begin(), base * width, vt.begin());
      for (int64_t d = 0; d <= depth; ++d) {
        branch[d] = static_cast<int32_t>(base + 3 * d);
        std::copy_n(k.begin() + (base + d) * width, width, kt.begin() + branch[d] * width);
        std::copy_n(v.begin() + (base + d) * width, width, vt.begin() + branch[d] * width);
      }
      const std::vector<int32_t> position = {static_cast<int32_t>(pos)};
      DeviceBuffer dk = upload(kt), dv = upload(vt), dbranch = upload(branch),
                   dpos = upload(position), dout = poisoned(qw), dwant = poisoned(qw);
      auto scratch =
          DeviceBuffer::allocate(attention_scratch_bytes(n_head, n_head_kv, head_dim, 512));
      ASSERT_TRUE(scratch.is_ok());
      AttnDecodeArgs a;
      attention_shape(a, dq, din_place_k, din_place_v, dwant, n_head, n_head_kv, head_dim, width,
                      kq_scale);
      a.pos = dpos.as<int32_t>();
      a.n_swa = n_swa;
      a.max_kv = n_swa > 0 ? n_swa : 512;
      attention_decode(a, scratch->data(), stream_.handle());
      AttnDecodeArgs b = a;
      b.k = dk.as<uint16_t>();
      b.v = dv.as<uint16_t>();
      b.out = dout.as<float>();
      b.branch = dbranch.as<int32_t>();
      b.branch_base = base;
      attention_decode(b, scratch->data(), stream_.handle());
      EXPECT_EQ(download(dout, qw), download(dwant, qw));
    }
  }
}

// Prefill attention: every token of a batch against the cache holding its own keys, causal,
// with GQA, a sliding window and batches that start past position 0; the tensor-core kernel
// (head dims of 64, 96, 128, 256) and the SIMT one (80: values not a multiple of 32).
TEST_F(CudaTest, AttentionPrefillMatchesCpu) {
  struct Case {
    int64_t n_head, n_head_kv, head_dim, pos0, n_tokens, n_swa;
  };
  for (const Case& c :
       {Case{8, 2, 128, 0, 37, 0}, Case{4, 1, 64, 100, 70, 16}, Case{6, 2, 96, 5, 20, 0},
        Case{2, 1, 256, 0, 33, 0}, Case{32, 8, 128, 300, 64, 0}, Case{4, 4, 64, 0, 1, 0},
        Case{4, 2, 80, 10, 30, 0}}) {
    SCOPED_TRACE(std::to_string(c.head_dim) + " pos0 " + std::to_string(c.pos0) + " swa " +
                 std::to_string(c.n_swa));
    const int64_t n_ctx = c.pos0 + c.n_tokens, width = c.n_head_kv * c.head_dim,
                  qw = c.n_head * c.head_dim;
    const std::vector<float> q = random_floats(c.n_tokens * qw, 11);
    const std::vector<uint16_t> k = to_fp16(random_floats(n_ctx * width, 12));
    const std::vector<uint16_t> v = to_fp16(random_floats(n_ctx * width, 13));
    const float kq_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<float> want;
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      const int64_t p = c.pos0 + t, first = c.n_swa > 0 ? std::max<int64_t>(0, p - c.n_swa + 1) : 0;
      const auto row = attention_reference(q.data() + t * qw, k, v, c.n_head, c.n_head_kv,
                                           c.head_dim, first, p + 1, kq_scale);
      want.insert(want.end(), row.begin(), row.end());
    }
    DeviceBuffer dq = upload(q), dk = upload(k), dv = upload(v), dout = poisoned(want.size());
    AttnPrefillArgs a;
    attention_shape(a, dq, dk, dv, dout, c.n_head, c.n_head_kv, c.head_dim, width, kq_scale);
    a.n_tokens = c.n_tokens;
    a.pos0 = c.pos0;
    a.n_swa = c.n_swa;
    attention_prefill(a, stream_.handle());
    EXPECT_LE(rel_l2(download(dout, want.size()), want), kAttnRelL2);
  }
}

// Multi-head latent attention's form (deepseek2): MQA over 576-dim keys whose first 512 dims
// are the values (v == k), GQA groups of 16 (V2-Lite) and 128 (V3), and the test presets'
// 80 / 64; decode, its replayable form and prefill against the CPU's math.
TEST_F(CudaTest, AttentionLatentFormMatchesCpu) {
  struct Case {
    int64_t n_head, pos0, n_tokens, kD = kAttnMaxLatentDim, kDv = kAttnMaxLatentDimV;
  };
  for (const Case& c : {Case{16, 700, 37}, Case{128, 90, 20}, Case{16, 0, 5},
                        Case{4, 30, 20, 80, 64}, Case{4, 0, 40, 80, 64}}) {
    const int64_t kD = c.kD, kDv = c.kDv;
    SCOPED_TRACE(std::to_string(c.n_head) + " heads, pos0 " + std::to_string(c.pos0) + ", dims " +
                 std::to_string(kD));
    const int64_t n_ctx = c.pos0 + c.n_tokens, qw = c.n_head * kD;
    const std::vector<float> q = random_floats(c.n_tokens * qw, 21);
    const std::vector<uint16_t> k = to_fp16(random_floats(n_ctx * kD, 22));
    const float kq_scale = 1.0f / std::sqrt(192.0f);
    std::vector<float> want;
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      const auto row = attention_reference(q.data() + t * qw, k, k, c.n_head, 1, kD, 0,
                                           c.pos0 + t + 1, kq_scale, kDv, kD);
      want.insert(want.end(), row.begin(), row.end());
    }
    const int64_t ow = c.n_head * kDv;
    DeviceBuffer dq = upload(q), dk = upload(k), dout = poisoned(want.size());
    AttnPrefillArgs a;
    attention_shape(a, dq, dk, dk, dout, c.n_head, 1, kD, kD, kq_scale);
    a.head_dim_v = kDv;
    a.n_tokens = c.n_tokens;
    a.pos0 = c.pos0;
    attention_prefill(a, stream_.handle());
    EXPECT_LE(rel_l2(download(dout, want.size()), want), kAttnRelL2) << "prefill";

    // Decode of the last token, plain and replayable.
    const int64_t last = c.n_tokens - 1;
    const std::vector<float> want_last(want.begin() + last * ow, want.end());
    DeviceBuffer dq1 = upload(std::vector<float>(q.begin() + last * qw, q.end()));
    DeviceBuffer d1 = poisoned(ow), d2 = poisoned(ow);
    const std::vector<int32_t> pos = {static_cast<int32_t>(n_ctx - 1)};
    DeviceBuffer dpos = upload(pos);
    auto scratch = DeviceBuffer::allocate(attention_scratch_bytes(c.n_head, 1, kDv, 2 * n_ctx));
    ASSERT_TRUE(scratch.is_ok());
    AttnDecodeArgs d;
    attention_shape(d, dq1, dk, dk, d1, c.n_head, 1, kD, kD, kq_scale);
    d.head_dim_v = kDv;
    d.kv_first = 0;
    d.kv_end = n_ctx;
    attention_decode(d, scratch->data(), stream_.handle());
    EXPECT_LE(rel_l2(download(d1, ow), want_last), kAttnRelL2) << "decode";
    d.out = d2.as<float>();
    d.pos = dpos.as<int32_t>();
    d.max_kv = 2 * n_ctx;
    attention_decode(d, scratch->data(), stream_.handle());
    EXPECT_LE(rel_l2(download(d2, ow), want_last), kAttnRelL2) << "decode, replayable";
  }
}

// The column-range ops of MLA: a copy between strided rows and an RMS norm of each row's
// first values in place, against the CPU's rms_norm of those values.
TEST_F(CudaTest, StridedColumnsMatchCpu) {
  const int64_t n_rows = 7, stride = 576, n = 512;
  const std::vector<float> x = random_floats(n_rows * stride, 31, 3.0f), w = random_floats(n, 32);
  std::vector<float> want = x;
  for (int64_t r = 0; r < n_rows; ++r) {
    compute::rms_norm(want.data() + r * stride, w.data(), n, 1e-6f, want.data() + r * stride);
  }
  DeviceBuffer dx = upload(x), dw = upload(w), dc = poisoned(n_rows * 64);
  rms_norm_cols(dx.as<float>(), n_rows, stride, n, dw.as<float>(), 1e-6f, stream_.handle());
  EXPECT_LE(rel_l2(download(dx, x.size()), want), kFloatRelL2);
  copy_cols(dx.as<float>() + n, stride, dc.as<float>(), 64, n_rows, 64, stream_.handle());
  const std::vector<float> got = download(dc, n_rows * 64);
  int bad = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t c = 0; c < 64; ++c) bad += got[r * 64 + c] != x[r * stride + n + c];
  }
  EXPECT_EQ(bad, 0);
}

// Dequantized rows: F32 bit for bit the CPU's dequantize_row, F16 that value rounded.
TEST_F(CudaTest, DequantizeMatchesCpuExactly) {
  uint32_t seed = 500;
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(gguf::type_name(type));
    // MXFP4: 91 blocks of 17 bytes, rows of odd length.
    const int64_t n_rows = 5, n_cols = quant::block_size(type) == 1 ? 104
                                       : type == GgmlType::MXFP4    ? 2912
                                                                    : 512;
    const std::vector<uint8_t> w = random_weights(type, n_rows, n_cols, &seed);
    const size_t row = quant::row_size(type, n_cols);
    std::vector<float> rows(n_rows * n_cols);
    for (int64_t r = 0; r < n_rows; ++r)
      quant::dequantize_row(type, w.data() + r * row, rows.data() + r * n_cols, n_cols);
    const std::vector<int32_t> ids = {3, 0, 4, 3};
    DeviceBuffer dw = upload(w), dids = upload(ids), d32 = poisoned(ids.size() * n_cols),
                 d16 = poisoned(n_rows * n_cols);
    const WeightView view{dw.data(), type, n_cols, n_rows};
    get_rows_f32(view, dids.as<int32_t>(), static_cast<int64_t>(ids.size()), d32.as<float>(),
                 stream_.handle());
    dequantize_rows_f16(view, 1, 3, d16.as<uint16_t>(), stream_.handle());
    const std::vector<float> got32 = download(d32, ids.size() * n_cols);
    std::vector<uint16_t> got16(3 * n_cols);
    ASSERT_TRUE(copy_to_host(got16.data(), d16.data(), got16.size() * 2));
    int bad = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      bad += std::memcmp(got32.data() + i * n_cols, rows.data() + ids[i] * n_cols, n_cols * 4) != 0;
    }
    for (int64_t i = 0; i < 3 * n_cols; ++i)
      bad += got16[i] != quant::f32_to_fp16(rows[n_cols + i]);
    EXPECT_EQ(bad, 0);
  }
}

// Prefill products (cuBLAS) against the CPU's matmul (which rounds the activations of
// quantized weights to 8-bit blocks as the GPU's products do), with weight tiles small
// enough that a matrix takes several.
TEST_F(CudaTest, GemmMatchesCpu) {
  Context cpu(1, "scalar");
  uint32_t seed = 700;
  const int64_t n = 37, n_rows = 300, n_cols = 512;
  auto gemm = Gemm::create(stream_.handle(), 64, n_cols, 64 * n_cols);
  ASSERT_TRUE(gemm.is_ok()) << gemm.status().message();
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(gguf::type_name(type));
    const std::vector<uint8_t> w = random_weights(type, n_rows, n_cols, &seed);
    const std::vector<float> x = random_floats(n * n_cols, seed++);
    std::vector<float> want(n * n_rows);
    cpu.matmul(WeightView{w.data(), type, n_cols, n_rows}, x.data(), n, want.data());
    DeviceBuffer dw = upload(w), dx = upload(x), dy = poisoned(n * n_rows);
    ASSERT_TRUE((*gemm)->matmul(WeightView{dw.data(), type, n_cols, n_rows}, dx.as<float>(), n,
                                dy.as<float>()));
    EXPECT_LE(rel_l2(download(dy, n * n_rows), want),
              type == GgmlType::F32 ? kFloatRelL2 : kGemmRelL2);
  }
}

// Per-head products of a stacked tensor (MLA's wk_b / wv_b in a prompt) against the CPU's
// matmul of each head's slice: activations converted in chunks of 16 tokens and weights
// dequantized one head per tile (the scratch is sized to force both).
TEST_F(CudaTest, GemmHeadsMatchesCpu) {
  Context cpu(1, "scalar");
  uint32_t seed = 750;
  const int64_t n = 37, n_heads = 4, r = 64, k = 256;
  auto gemm = Gemm::create(stream_.handle(), 64, k, r * k);
  ASSERT_TRUE(gemm.is_ok()) << gemm.status().message();
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(gguf::type_name(type));
    const std::vector<uint8_t> w = random_weights(type, n_heads * r, k, &seed);
    const std::vector<float> x = random_floats(n * n_heads * k, seed++);
    std::vector<float> want(n * n_heads * r), xh(n * k), yh(n * r);
    for (int64_t h = 0; h < n_heads; ++h) {
      for (int64_t t = 0; t < n; ++t)
        std::copy_n(x.data() + (t * n_heads + h) * k, k, xh.data() + t * k);
      const uint8_t* wh = w.data() + h * r * quant::row_size(type, k);
      cpu.matmul(WeightView{wh, type, k, r}, xh.data(), n, yh.data());
      for (int64_t t = 0; t < n; ++t)
        std::copy_n(yh.data() + t * r, r, want.data() + (t * n_heads + h) * r);
    }
    DeviceBuffer dw = upload(w), dx = upload(x), dy = poisoned(n * n_heads * r);
    ASSERT_TRUE((*gemm)->matmul_heads(WeightView{dw.data(), type, k, n_heads * r}, n_heads,
                                      dx.as<float>(), n, dy.as<float>()));
    EXPECT_LE(rel_l2(download(dy, n * n_heads * r), want),
              type == GgmlType::F32 ? kFloatRelL2 : kGemmRelL2);
  }
}

// A prompt's MoE products over every expert at once against the CPU's matmul of each
// expert's rows; two stacked tensors share the converted activations. Shapes: one empty
// expert, one of 150 rows (three tiles of the expert kernel), 70 weight rows (a partial
// tile), columns ending in half a step (32-element formats: 288) or in no multiple of 8
// (float formats: 140, the cuBLAS loop, two experts per dequantized weight tile for BF16).
TEST_F(CudaTest, GemmExpertsMatchesCpu) {
  Context cpu(1, "scalar");
  uint32_t seed = 780;
  const std::vector<int64_t> begin = {0, 10, 10, 37, 187, 188, 210};
  const int64_t n_expert = static_cast<int64_t>(begin.size()) - 1, n = begin.back(), r = 70;
  for (GgmlType type : kAllTypes) {
    const int64_t block = quant::block_size(type);
    for (const int64_t k : {block == 1    ? int64_t{140}
                            : block == 32 ? int64_t{288}
                                          : int64_t{512},
                            int64_t{256}}) {
      SCOPED_TRACE(std::string(gguf::type_name(type)) + " k " + std::to_string(k));
      auto gemm = Gemm::create(stream_.handle(), 16, k, 2 * r * k, n * k);
      ASSERT_TRUE(gemm.is_ok()) << gemm.status().message();
      const std::vector<float> x = random_floats(n * k, seed++);
      std::vector<uint8_t> w[2];
      std::vector<float> want[2];
      DeviceBuffer dw[2], dy[2];
      WeightView views[2];
      float* ys[2];
      for (int i = 0; i < 2; ++i) {
        w[i] = random_weights(type, n_expert * r, k, &seed);
        want[i].assign(n * r, 0.0f);
        for (int64_t e = 0; e < n_expert; ++e) {
          const uint8_t* we = w[i].data() + e * r * quant::row_size(type, k);
          if (begin[e + 1] > begin[e])
            cpu.matmul(WeightView{we, type, k, r}, x.data() + begin[e] * k, begin[e + 1] - begin[e],
                       want[i].data() + begin[e] * r);
        }
        dw[i] = upload(w[i]);
        dy[i] = poisoned(n * r);
        views[i] = WeightView{dw[i].data(), type, k, r};
        ys[i] = dy[i].as<float>();
      }
      DeviceBuffer dx = upload(x);
      const WeightView* ws[2] = {&views[0], &views[1]};
      ASSERT_TRUE((*gemm)->matmul_experts(ws, ys, 2, begin, dx.as<float>()));
      // The 8-bit path's block products are the CPU's exact integer sums, scaled alike: only
      // the order of the float sums differs.
      const bool q8 = expert_gemm_takes_q8(static_cast<uint32_t>(type), k);
      for (int i = 0; i < 2; ++i) {
        EXPECT_LE(rel_l2(download(dy[i], n * r), want[i]),
                  type == GgmlType::F32 || q8 ? kFloatRelL2 : kGemmRelL2);
      }
    }
  }
}

// Batched products (a few tokens, the weights read once): each row as the CPU's matmul.
TEST_F(CudaTest, BatchedMatvecMatchesCpu) {
  Context cpu(1, "scalar");
  uint32_t seed = 1300;
  for (GgmlType type : kAllTypes) {
    for (int64_t cols : {int64_t{136}, int64_t{768}, int64_t{2304}}) {
      // 768 and 2304: 3 and 9 blocks of 256, the tensor-core kernel's groups of 4 blocks
      // (one partial; three, split two to one) for the K-quants.
      if ((quant::block_size(type) == 1) != (cols == 136)) continue;
      if (cols == 2304 && quant::block_size(type) != 256) continue;
      SCOPED_TRACE(gguf::type_name(type));
      const int64_t rows = 70;
      const std::vector<uint8_t> w = random_weights(type, rows, cols, &seed);
      for (int64_t n : {2, 3, 5, 8, 9, 16}) {
        const std::vector<float> x = random_floats(n * cols, seed++);
        std::vector<float> want(n * rows);
        cpu.matmul(WeightView{w.data(), type, cols, rows}, x.data(), n, want.data());
        DeviceBuffer dw = upload(w), dx = upload(x), dy = poisoned(n * rows);
        auto scratch = DeviceBuffer::allocate(act_q8_layout(n * cols).total);
        ASSERT_TRUE(scratch.is_ok());
        const ActQ8 act =
            quantize_for(type, dx.as<float>(), n * cols, scratch->data(), stream_.handle());
        matvec_batched(WeightView{dw.data(), type, cols, rows}, act, n, dy.as<float>(),
                       stream_.handle());
        const std::vector<float> got = download(dy, n * rows);
        EXPECT_LE(rel_l2(got, want), kMatvecRelL2) << n;
        // In every configuration (one or two rows per warp, each row split over two warps),
        // each token bit for bit its single-token product, its activations quantized alone.
        std::vector<ActQ8> alone(n);
        std::vector<DeviceBuffer> keep;
        for (int64_t t = 0; t < n; ++t) {
          keep.push_back(
              upload(std::vector<float>(x.begin() + t * cols, x.begin() + (t + 1) * cols)));
          auto st = DeviceBuffer::allocate(act_q8_layout(cols).total);
          ASSERT_TRUE(st.is_ok());
          alone[t] =
              quantize_for(type, keep.back().as<float>(), cols, st->data(), stream_.handle());
          keep.push_back(std::move(st).value());
        }
        // Q4_K, Q5_K and Q6_K on the tensor cores (from 2 tokens) and with dp4a (17).
        const int mma_default = g_matvec_mma_min_tokens;
        for (int mma_min : {2, 17}) {
          g_matvec_mma_min_tokens = mma_min;
          for (int config : {0, 1, 2}) {
            g_matvec_config_override = config;
            DeviceBuffer dyb = poisoned(n * rows);
            matvec_batched(WeightView{dw.data(), type, cols, rows}, act, n, dyb.as<float>(),
                           stream_.handle());
            const std::vector<float> batch = download(dyb, n * rows);
            for (int64_t t = 0; t < n; ++t) {
              DeviceBuffer dyt = poisoned(rows);
              matvec_quantized(WeightView{dw.data(), type, cols, rows}, alone[t], dyt.as<float>(),
                               stream_.handle());
              EXPECT_EQ(download(dyt, rows), std::vector<float>(batch.begin() + t * rows,
                                                                batch.begin() + (t + 1) * rows))
                  << "token " << t << " of " << n << ", configuration " << config
                  << ", tensor cores from " << mma_min << " tokens, " << cols << " columns";
            }
            g_matvec_config_override = -1;
          }
        }
        g_matvec_mma_min_tokens = mma_default;
        // With a residual, the single-token kernel on row 0 in each configuration: the
        // product also added to the residual row (exactly compute::add of it).
        for (int config : {0, 1, 2}) {
          const std::vector<float> res = random_floats(rows, seed++);
          std::vector<float> want_res = res;
          DeviceBuffer dres = upload(res), dy1 = poisoned(rows);
          g_matvec_config_override = config;
          matvec_quantized(WeightView{dw.data(), type, cols, rows}, act, dy1.as<float>(),
                           stream_.handle(), dres.as<float>());
          g_matvec_config_override = -1;
          const std::vector<float> got1 = download(dy1, rows);
          EXPECT_LE(rel_l2(got1, std::vector<float>(want.begin(), want.begin() + rows)),
                    kMatvecRelL2)
              << config;
          compute::add(want_res.data(), got1.data(), rows);
          EXPECT_EQ(download(dres, rows), want_res) << config;
        }
      }
    }
  }
}

// Two matrices of one shape on one token (K and V, gate and up): bit for bit two single
// products in every configuration, the ones that split rows (two launches) included.
TEST_F(CudaTest, PairedMatvecIsTwoProducts) {
  uint32_t seed = 1500;
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(gguf::type_name(type));
    const int64_t rows = 70, cols = quant::block_size(type) == 1 ? 136 : 768;
    const std::vector<uint8_t> w = random_weights(type, rows, cols, &seed),
                               w2 = random_weights(type, rows, cols, &seed);
    const std::vector<float> x = random_floats(cols, seed++);
    DeviceBuffer dw = upload(w), dw2 = upload(w2), dx = upload(x);
    auto scratch = DeviceBuffer::allocate(act_q8_layout(cols).total);
    ASSERT_TRUE(scratch.is_ok());
    const ActQ8 act = quantize_for(type, dx.as<float>(), cols, scratch->data(), stream_.handle());
    const WeightView a{dw.data(), type, cols, rows}, b{dw2.data(), type, cols, rows};
    for (int config : {-1, 0, 1, 2}) {
      g_matvec_config_override = config;
      DeviceBuffer ya = poisoned(rows), yb = poisoned(rows), pa = poisoned(rows),
                   pb = poisoned(rows);
      matvec_quantized(a, act, ya.as<float>(), stream_.handle());
      matvec_quantized(b, act, yb.as<float>(), stream_.handle());
      matvec_pair(a, b, act, pa.as<float>(), pb.as<float>(), stream_.handle());
      g_matvec_config_override = -1;
      EXPECT_EQ(download(pa, rows), download(ya, rows)) << config;
      EXPECT_EQ(download(pb, rows), download(yb, rows)) << config;
    }
  }
}

// Grouped expert products: each (token, slot) pair's expert matrix times its token's row,
// against the CPU's matmul of that expert's slice.
TEST_F(CudaTest, GroupedMatvecMatchesCpu) {
  Context cpu(1, "scalar");
  uint32_t seed = 900;
  const int64_t n_expert = 5, rows = 96, cols = 512, n_tok = 3, k = 2;
  const std::vector<int32_t> ids = {4, 1, 0, 4, 2, 3};  // (n_tok, k)
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::F32,
                        GgmlType::Q6_K, GgmlType::MXFP4}) {
    SCOPED_TRACE(gguf::type_name(type));
    const std::vector<uint8_t> w = random_weights(type, n_expert * rows, cols, &seed);
    const std::vector<float> x = random_floats(n_tok * cols, seed++);
    const WeightView host_all{w.data(), type, cols, n_expert * rows};
    for (int act_div : {static_cast<int>(k), 1}) {  // gate/up (rows per token), down (per pair)
      const int64_t n_pairs = act_div == 1 ? n_tok : n_tok * k;
      std::vector<float> want(n_pairs * rows);
      for (int64_t i = 0; i < n_pairs; ++i) {
        cpu.matmul(host_all.rows(ids[i] * rows, rows), x.data() + (i / act_div) * cols, 1,
                   want.data() + i * rows);
      }
      DeviceBuffer dw = upload(w), dx = upload(x), dids = upload(ids),
                   dy = poisoned(n_pairs * rows);
      const int64_t n_act = n_pairs / (act_div == 1 ? 1 : k);
      auto scratch = DeviceBuffer::allocate(act_q8_layout(n_act * cols).total);
      ASSERT_TRUE(scratch.is_ok());
      const ActQ8 act =
          quantize_for(type, dx.as<float>(), n_act * cols, scratch->data(), stream_.handle());
      matvec_grouped(WeightView{dw.data(), type, cols, rows}, n_expert, dids.as<int32_t>(), n_pairs,
                     act_div, act, dy.as<float>(), stream_.handle());
      const std::vector<float> got = download(dy, n_pairs * rows);
      EXPECT_LE(rel_l2(got, want), kMatvecRelL2) << act_div;
      // Two stacked tensors in one launch (gate and up): the first's results unchanged, the
      // second's as its own grouped product.
      const std::vector<uint8_t> w2 = random_weights(type, n_expert * rows, cols, &seed);
      DeviceBuffer dw2 = upload(w2), dy2 = poisoned(n_pairs * rows),
                   dy2a = poisoned(n_pairs * rows);
      matvec_grouped(WeightView{dw2.data(), type, cols, rows}, n_expert, dids.as<int32_t>(),
                     n_pairs, act_div, act, dy2a.as<float>(), stream_.handle());
      matvec_grouped_pair(WeightView{dw.data(), type, cols, rows},
                          WeightView{dw2.data(), type, cols, rows}, n_expert, dids.as<int32_t>(),
                          n_pairs, act_div, act, dy.as<float>(), dy2.as<float>(), stream_.handle());
      EXPECT_EQ(download(dy, n_pairs * rows), got) << act_div;
      EXPECT_EQ(download(dy2, n_pairs * rows), download(dy2a, n_pairs * rows)) << act_div;
    }
  }
}

// Grouped products with several pairs per expert, each expert read once for all its pairs
// on the tensor cores: every pair bit for bit what the per-pair kernel gives it (its
// single-token product), 16 tokens of 2 experts each of 5 (gate/up's rows per token, down's
// per pair), and 21 pairs of one expert (more than a block's 16 tokens at once).
TEST_F(CudaTest, GroupedExpertsOnTensorCoresAsPerPair) {
  uint32_t seed = 950;
  const int64_t n_expert = 5, rows = 70, n_tok = 16, k = 2;
  std::vector<int32_t> ids(n_tok * k);
  std::mt19937 rng(seed);
  for (int64_t t = 0; t < n_tok; ++t) {  // two distinct experts per token
    ids[t * k] = static_cast<int32_t>(rng() % n_expert);
    ids[t * k + 1] = static_cast<int32_t>((ids[t * k] + 1 + rng() % (n_expert - 1)) % n_expert);
  }
  struct Case {
    std::vector<int32_t> ids;
    int act_div;
  };
  const std::vector<Case> cases = {
      {ids, static_cast<int>(k)}, {ids, 1}, {std::vector<int32_t>(21, 3), 1}};
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    for (int64_t cols : {768, 2304}) {  // 3 and 9 blocks: partial groups of 4
      SCOPED_TRACE(std::string(gguf::type_name(type)) + ", " + std::to_string(cols) + " columns");
      const std::vector<uint8_t> w = random_weights(type, n_expert * rows, cols, &seed),
                                 w2 = random_weights(type, n_expert * rows, cols, &seed);
      DeviceBuffer dw = upload(w), dw2 = upload(w2);
      const WeightView a{dw.data(), type, cols, rows}, b{dw2.data(), type, cols, rows};
      for (const Case& c : cases) {
        const auto n_pairs = static_cast<int64_t>(c.ids.size());
        const int64_t n_act = n_pairs / c.act_div;
        const std::vector<float> x = random_floats(n_act * cols, seed++);
        DeviceBuffer dx = upload(x), dids = upload(c.ids);
        auto scratch = DeviceBuffer::allocate(act_q8_layout(n_act * cols).total);
        ASSERT_TRUE(scratch.is_ok());
        const ActQ8 act =
            quantize_for(type, dx.as<float>(), n_act * cols, scratch->data(), stream_.handle());
        std::vector<std::vector<float>> got;
        const int min_pairs = g_matvec_mma_min_pairs;
        for (int on : {0, 1}) {  // per pair, then on the tensor cores
          g_matvec_mma_min_pairs = on != 0 ? 1 : 0x7fff;
          DeviceBuffer y = poisoned(n_pairs * rows), y2 = poisoned(n_pairs * rows);
          matvec_grouped_pair(a, b, n_expert, dids.as<int32_t>(), n_pairs, c.act_div, act,
                              y.as<float>(), y2.as<float>(), stream_.handle());
          got.push_back(download(y, n_pairs * rows));
          got.push_back(download(y2, n_pairs * rows));
        }
        g_matvec_mma_min_pairs = min_pairs;
        EXPECT_EQ(got[2], got[0]) << n_pairs << " pairs, act_div " << c.act_div;
        EXPECT_EQ(got[3], got[1]) << n_pairs << " pairs, act_div " << c.act_div << ", second";
      }
    }
  }
}

// Routing and the MoE plumbing against the CPU's rule (top-k by probability, lower id on
// ties, weights renormalised), and the exact row moves and slot sums.
// gpt-oss's pieces against the CPU's: the router bias and the softmax over the chosen
// logits, each (token, slot) row's expert bias, the clamped SwiGLU (plain and fused with
// the down product's rounding) and RoPE with YaRN.
TEST_F(CudaTest, GptOssPiecesMatchCpu) {
  const int64_t n_tok = 5, ne = 8, k = 2, width = 256;
  const std::vector<float> logits = random_floats(n_tok * ne, 31, 2.0f);
  const std::vector<float> bias = random_floats(ne, 32, 0.5f);
  std::vector<int32_t> want_sel(n_tok * k);
  std::vector<float> want_w(n_tok * k);
  for (int64_t t = 0; t < n_tok; ++t) {
    std::vector<float> row(logits.begin() + t * ne, logits.begin() + (t + 1) * ne);
    compute::add(row.data(), bias.data(), ne);
    compute::top_k(row.data(), ne, k, want_sel.data() + t * k);
    for (int64_t s = 0; s < k; ++s) want_w[t * k + s] = row[want_sel[t * k + s]];
    compute::softmax(want_w.data() + t * k, k);
  }
  DeviceBuffer dl = upload(logits), db = upload(bias), dsel = poisoned(n_tok * k),
               dw = poisoned(n_tok * k);
  RouteOptions opt;
  opt.gating = RouteGating::kSoftmaxOfK;
  opt.logit_bias = db.as<float>();
  opt.norm = false;
  moe_route(dl.as<float>(), n_tok, ne, k, dsel.as<int32_t>(), dw.as<float>(), stream_.handle(),
            opt);
  std::vector<int32_t> sel(n_tok * k);
  ASSERT_TRUE(stream_.synchronize());
  ASSERT_TRUE(copy_to_host(sel.data(), dsel.data(), sel.size() * 4));
  EXPECT_EQ(sel, want_sel);
  EXPECT_LE(rel_l2(download(dw, n_tok * k), want_w), 1e-6);

  // Expert biases by row: row r += bias[sel[r]].
  const std::vector<float> rows = random_floats(n_tok * k * width, 33);
  const std::vector<float> ebias = random_floats(ne * width, 34, 0.1f);
  std::vector<float> want_rows = rows;
  for (int64_t r = 0; r < n_tok * k; ++r)
    compute::add(want_rows.data() + r * width, ebias.data() + want_sel[r] * width, width);
  DeviceBuffer dr = upload(rows), deb = upload(ebias);
  add_rows_by_id(dr.as<float>(), deb.as<float>(), dsel.as<int32_t>(), n_tok * k, width,
                 stream_.handle());
  ASSERT_TRUE(stream_.synchronize());
  EXPECT_EQ(download(dr, rows.size()), want_rows);

  // The clamped SwiGLU, with gate and up values past the limit.
  const int64_t n = 4 * width;
  const std::vector<float> gate = random_floats(n, 35, 12.0f), up = random_floats(n, 36, 12.0f);
  std::vector<float> want_glu = gate;
  compute::swiglu_oai(want_glu.data(), up.data(), n, compute::kSwigluOaiAlpha,
                      compute::kSwigluOaiLimit);
  DeviceBuffer dg = upload(gate), du = upload(up), dg2 = upload(gate);
  glu(UnaryOp::kSwigluOai, dg.as<float>(), du.as<float>(), n, stream_.handle());
  auto q = DeviceBuffer::allocate(act_q8_layout(n).total);
  ASSERT_TRUE(q.is_ok());
  glu_quantize(UnaryOp::kSwigluOai, dg2.as<float>(), du.as<float>(), n, ActFormat::kQ8_0, q->data(),
               stream_.handle());
  ASSERT_TRUE(stream_.synchronize());
  EXPECT_LE(rel_l2(download(dg, n), want_glu), 1e-6);
  EXPECT_LE(rel_l2(download(dg2, n), want_glu), 1e-6);

  // RoPE with YaRN (gpt-oss's: factor 32 over 4096 positions, base 150000).
  const int64_t hd = 64, n_head = 3;
  const std::vector<float> x = random_floats(n_tok * n_head * hd, 37);
  const std::vector<int32_t> pos = {0, 1, 17, 300, 4095};
  const float freq_base = 150000.0f, freq_scale = 1.0f / 32.0f;
  const compute::Yarn y = compute::yarn(hd, 4096, freq_base, 32.0f, 1.0f, 1.0f, 1.0f);
  std::vector<float> want_x = x;
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      compute::rope_yarn(want_x.data() + (t * n_head + h) * hd, hd, pos[t], freq_base, freq_scale,
                         nullptr, y, true);
    }
  }
  RopeParams p;
  p.head_dim = hd;
  p.n_rot = hd;
  p.freq_base = freq_base;
  p.freq_scale = freq_scale;
  p.neox = true;
  p.ext_factor = y.ext_factor;
  p.corr_lo = y.corr_lo;
  p.corr_hi = y.corr_hi;
  p.mscale = y.attn_factor * (1.0f + 0.1f * std::log(1.0f / freq_scale));
  DeviceBuffer dx = upload(x), dpos = upload(pos);
  rope(dx.as<float>(), n_tok, n_head, n_head * hd, dpos.as<int32_t>(), p, stream_.handle());
  ASSERT_TRUE(stream_.synchronize());
  EXPECT_LE(rel_l2(download(dx, x.size()), want_x), 1e-6);
}

TEST_F(CudaTest, MoeRoutingAndRowsMatchCpu) {
  const int64_t n_tok = 7, ne = 8, k = 3, width = 300;
  std::vector<float> probs = random_floats(n_tok * ne, 21, 2.0f);
  probs[2 * ne + 5] = probs[2 * ne + 1];  // a tie: the lower id wins
  const std::vector<float> logits = probs;
  for (int64_t t = 0; t < n_tok; ++t) compute::softmax(probs.data() + t * ne, ne);
  std::vector<int32_t> want_sel(n_tok * k);
  std::vector<float> want_w(n_tok * k);
  for (int64_t t = 0; t < n_tok; ++t) {
    float sum = 0.0f;
    for (int64_t slot = 0; slot < k; ++slot) {
      int32_t best = -1;
      for (int32_t e = 0; e < ne; ++e) {
        bool taken = false;
        for (int64_t s = 0; s < slot; ++s) taken |= want_sel[t * k + s] == e;
        if (!taken && (best < 0 || probs[t * ne + e] > probs[t * ne + best])) best = e;
      }
      want_sel[t * k + slot] = best;
      want_w[t * k + slot] = probs[t * ne + best];
      sum += probs[t * ne + best];
    }
    for (int64_t slot = 0; slot < k; ++slot) want_w[t * k + slot] /= sum;
  }
  DeviceBuffer dp = upload(probs), dsel = poisoned(n_tok * k), dw = poisoned(n_tok * k);
  moe_top_k(dp.as<float>(), n_tok, ne, k, dsel.as<int32_t>(), dw.as<float>(), stream_.handle());
  std::vector<int32_t> sel(n_tok * k);
  ASSERT_TRUE(stream_.synchronize());
  ASSERT_TRUE(copy_to_host(sel.data(), dsel.data(), sel.size() * 4));
  EXPECT_EQ(sel, want_sel);
  EXPECT_EQ(rel_l2(download(dw, n_tok * k), want_w), 0.0);
  // Softmax and top-k in one launch: exactly the two kernels' results.
  {
    DeviceBuffer dl = upload(logits), dl2 = upload(logits), dsel2 = poisoned(n_tok * k),
                 dw2 = poisoned(n_tok * k), dsel3 = poisoned(n_tok * k), dw3 = poisoned(n_tok * k);
    softmax(dl.as<float>(), n_tok, ne, stream_.handle());
    moe_top_k(dl.as<float>(), n_tok, ne, k, dsel2.as<int32_t>(), dw2.as<float>(), stream_.handle());
    moe_route(dl2.as<float>(), n_tok, ne, k, dsel3.as<int32_t>(), dw3.as<float>(),
              stream_.handle());
    std::vector<int32_t> sel2(n_tok * k), sel3(n_tok * k);
    ASSERT_TRUE(stream_.synchronize());
    ASSERT_TRUE(copy_to_host(sel2.data(), dsel2.data(), sel2.size() * 4));
    ASSERT_TRUE(copy_to_host(sel3.data(), dsel3.data(), sel3.size() * 4));
    EXPECT_EQ(sel3, sel2);
    EXPECT_EQ(sel3, want_sel);
    EXPECT_EQ(download(dw3, n_tok * k), download(dw2, n_tok * k));
    EXPECT_EQ(download(dl2, n_tok * ne), download(dl, n_tok * ne));
  }

  // gather rows of tokens, scatter them to pairs, sum slots with the weights.
  const std::vector<float> x = random_floats(n_tok * width, 22),
                           slots = random_floats(n_tok * k * width, 23);
  const std::vector<int32_t> pairs = {5, 0, 20, 7};
  std::vector<float> want_g, want_c(n_tok * width);
  for (int32_t p : pairs)
    want_g.insert(want_g.end(), x.begin() + (p / k) * width, x.begin() + (p / k + 1) * width);
  for (int64_t t = 0; t < n_tok; ++t) {
    float* o = want_c.data() + t * width;
    for (int64_t s = 0; s < k; ++s) {
      std::vector<float> r(slots.begin() + (t * k + s) * width,
                           slots.begin() + (t * k + s + 1) * width);
      compute::scale(r.data(), want_w[t * k + s], width);
      if (s == 0)
        std::copy(r.begin(), r.end(), o);
      else
        compute::add(o, r.data(), width);
    }
  }
  DeviceBuffer dx = upload(x), dpairs = upload(pairs), dg = poisoned(pairs.size() * width),
               dslots = upload(slots), dc = poisoned(n_tok * width), dscat = upload(slots);
  gather_rows(dx.as<float>(), dpairs.as<int32_t>(), 4, k, width, dg.as<float>(), stream_.handle());
  moe_combine(dslots.as<float>(), dw.as<float>(), n_tok, k, width, dc.as<float>(),
              stream_.handle());
  scatter_rows(dg.as<float>(), dpairs.as<int32_t>(), 4, width, dscat.as<float>(), stream_.handle());
  EXPECT_EQ(rel_l2(download(dg, pairs.size() * width), want_g), 0.0);
  EXPECT_EQ(rel_l2(download(dc, n_tok * width), want_c), 0.0);
  // The slot sum also added to residual rows: exactly compute::add of it.
  const std::vector<float> res = random_floats(n_tok * width, 24);
  std::vector<float> want_res = res;
  compute::add(want_res.data(), want_c.data(), n_tok * width);
  DeviceBuffer dres = upload(res), dc2 = poisoned(n_tok * width);
  moe_combine(dslots.as<float>(), dw.as<float>(), n_tok, k, width, dc2.as<float>(),
              stream_.handle(), dres.as<float>());
  EXPECT_EQ(download(dres, n_tok * width), want_res);
  EXPECT_EQ(rel_l2(download(dc2, n_tok * width), want_c), 0.0);
  std::vector<float> want_s = slots;
  for (size_t r = 0; r < pairs.size(); ++r)
    std::copy_n(want_g.begin() + r * width, width, want_s.begin() + pairs[r] * width);
  EXPECT_EQ(rel_l2(download(dscat, slots.size()), want_s), 0.0);
}

// The fused decode kernels write exactly what their two unfused kernels write, also for
// rows of a width that is no multiple of 256 (gpt-oss's 2880: a partial last block).
TEST_F(CudaTest, FusedKernelsMatchTheirUnfusedPairsExactly) {
  const int64_t rows = 3, n = 1024;
  const std::vector<float> x = random_floats(rows * n, 41, 2.0f);
  const std::vector<float> up = random_floats(rows * n, 43);
  const size_t bytes = act_q8_layout(rows * n).total;
  const auto bytes_of = [&](const DeviceBuffer& b, size_t len) {
    std::vector<uint8_t> v(len);
    EXPECT_TRUE(stream_.synchronize());
    EXPECT_TRUE(copy_to_host(v.data(), b.data(), len));
    return v;
  };
  // rms_norm + quantize_act against rms_norm_quantize on nr rows of `width`.
  const auto check_norm = [&](ActFormat f, int64_t nr, int64_t width) {
    SCOPED_TRACE(std::to_string(static_cast<int>(f)) + " width " + std::to_string(width));
    ASSERT_TRUE(norm_quantize_fits(f, width));
    const int64_t count = nr * width;
    const size_t nbytes = act_q8_layout(count).total;
    DeviceBuffer dx = upload(random_floats(count, 41, 2.0f)), dw = upload(random_floats(width, 42)),
                 out1 = poisoned(count), out2 = poisoned(count);
    auto q1 = DeviceBuffer::allocate(nbytes), q2 = DeviceBuffer::allocate(nbytes);
    ASSERT_TRUE(q1.is_ok() && q2.is_ok());
    ASSERT_TRUE(zero_device(q1->data(), nbytes) && zero_device(q2->data(), nbytes));
    rms_norm(dx.as<float>(), dw.as<float>(), nr, width, 1e-5f, out1.as<float>(), stream_.handle());
    quantize_act(f, out1.as<float>(), count, q1->data(), stream_.handle());
    rms_norm_quantize(dx.as<float>(), dw.as<float>(), nr, width, 1e-5f, out2.as<float>(), f,
                      q2->data(), stream_.handle());
    EXPECT_EQ(bytes_of(out1, count * 4), bytes_of(out2, count * 4));
    EXPECT_EQ(bytes_of(*q1, nbytes), bytes_of(*q2, nbytes));
  };
  for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_1}) check_norm(f, 2, 2880);
  EXPECT_FALSE(norm_quantize_fits(ActFormat::kQ8_K, 2880));
  for (ActFormat f : {ActFormat::kQ8_K, ActFormat::kQ8_0, ActFormat::kQ8_1}) {
    SCOPED_TRACE(static_cast<int>(f));
    check_norm(f, rows, n);
    auto q1 = DeviceBuffer::allocate(bytes), q2 = DeviceBuffer::allocate(bytes);
    ASSERT_TRUE(q1.is_ok() && q2.is_ok());
    DeviceBuffer g1 = upload(x), g2 = upload(x), du = upload(up);
    ASSERT_TRUE(zero_device(q1->data(), bytes) && zero_device(q2->data(), bytes));
    glu(UnaryOp::kSilu, g1.as<float>(), du.as<float>(), rows * n, stream_.handle());
    quantize_act(f, g1.as<float>(), rows * n, q1->data(), stream_.handle());
    glu_quantize(UnaryOp::kSilu, g2.as<float>(), du.as<float>(), rows * n, f, q2->data(),
                 stream_.handle());
    EXPECT_EQ(bytes_of(g1, rows * n * 4), bytes_of(g2, rows * n * 4));
    EXPECT_EQ(bytes_of(*q1, bytes), bytes_of(*q2, bytes));
  }
  // Activations rounded as the CPU rounds them, as F16 (the prefill products' input).
  const int64_t n16 = 768;
  const std::vector<float> a = random_floats(n16, 46);
  DeviceBuffer da = upload(a);
  for (ActFormat f : {ActFormat::kQ8_K, ActFormat::kQ8_0, ActFormat::kQ8_1}) {
    std::vector<uint16_t> want(n16), got(n16);
    if (f == ActFormat::kQ8_K) {
      std::vector<quant::BlockQ8_K> ref(n16 / 256);
      quant::quantize_row_q8_k(a.data(), ref.data(), n16);
      for (int64_t i = 0; i < n16; ++i)
        want[i] = quant::f32_to_fp16(ref[i / 256].qs[i % 256] * ref[i / 256].d);
    } else {
      std::vector<quant::BlockQ8_0> r0(n16 / 32);
      std::vector<quant::BlockQ8_1> r1(n16 / 32);
      quant::quantize_row_q8_0(a.data(), r0.data(), n16);
      quant::quantize_row_q8_1(a.data(), r1.data(), n16);
      for (int64_t i = 0; i < n16; ++i) {
        const bool one = f == ActFormat::kQ8_1;
        const int q = one ? r1[i / 32].qs[i % 32] : r0[i / 32].qs[i % 32];
        const float d = quant::fp16_to_f32(one ? r1[i / 32].d : r0[i / 32].d);
        want[i] = quant::f32_to_fp16(static_cast<float>(q) * d);
      }
    }
    auto d16 = DeviceBuffer::allocate(n16 * 2);
    ASSERT_TRUE(d16.is_ok());
    quantize_to_f16(f, da.as<float>(), n16, d16->as<uint16_t>(), stream_.handle());
    ASSERT_TRUE(stream_.synchronize());
    ASSERT_TRUE(copy_to_host(got.data(), d16->data(), n16 * 2));
    EXPECT_EQ(got, want) << static_cast<int>(f);
  }
  // RoPE of q and k in one launch: the two launches' results.
  const int64_t n_tok = 3, nq = 8, nk = 2, hd = 128;
  const std::vector<float> q = random_floats(n_tok * nq * hd, 44),
                           k = random_floats(n_tok * nk * hd, 45);
  const std::vector<int32_t> pos = {5, 6, 7000};
  RopeParams p;
  p.head_dim = hd;
  p.n_rot = hd;
  p.freq_base = 500000.0f;
  p.neox = true;
  DeviceBuffer dpos = upload(pos), q1 = upload(q), k1 = upload(k), q2 = upload(q), k2 = upload(k);
  rope(q1.as<float>(), n_tok, nq, nq * hd, dpos.as<int32_t>(), p, stream_.handle());
  rope(k1.as<float>(), n_tok, nk, nk * hd, dpos.as<int32_t>(), p, stream_.handle());
  rope_qk(q2.as<float>(), nq, k2.as<float>(), nk, n_tok, dpos.as<int32_t>(), p, stream_.handle());
  EXPECT_EQ(rel_l2(download(q2, q.size()), download(q1, q.size())), 0.0);
  EXPECT_EQ(rel_l2(download(k2, k.size()), download(k1, k.size())), 0.0);

  // A decode step's RoPE and KV store in one launch (each of n_tok sequences one row, its
  // own caches), normal and NeoX, all dims or a rotated part: the two launches' floats and
  // halves.
  const int64_t vw = nk * 64, n_ctx = 7001;
  const std::vector<float> v = random_floats(n_tok * vw, 46);
  DeviceBuffer dv = upload(v);
  const auto halves = [&](const DeviceBuffer& b, size_t n) {
    std::vector<uint16_t> h(n);
    EXPECT_TRUE(stream_.synchronize());
    EXPECT_TRUE(copy_to_host(h.data(), b.data(), n * 2));
    return h;
  };
  for (const bool neox : {false, true}) {
    for (const int64_t n_rot : {hd, hd / 2}) {
      SCOPED_TRACE(std::to_string(neox) + " " + std::to_string(n_rot));
      p.neox = neox;
      p.n_rot = n_rot;
      std::vector<DeviceBuffer> caches;
      AttnSeqs one, both;
      one.n = both.n = static_cast<int>(n_tok);
      for (int64_t t = 0; t < n_tok; ++t) {
        for (int c = 0; c < 4; ++c) caches.push_back(poisoned(n_ctx * nk * hd / 2));
        one.k[t] = caches[4 * t].as<uint16_t>();
        one.v[t] = caches[4 * t + 1].as<uint16_t>();
        both.k[t] = caches[4 * t + 2].as<uint16_t>();
        both.v[t] = caches[4 * t + 3].as<uint16_t>();
      }
      DeviceBuffer qa = upload(q), ka = upload(k), qb = upload(q), kb = upload(k);
      rope_qk(qa.as<float>(), nq, ka.as<float>(), nk, n_tok, dpos.as<int32_t>(), p,
              stream_.handle());
      store_kv_f16_seqs(ka.as<float>(), dv.as<float>(), nk * hd, vw, dpos.as<int32_t>(), one,
                        stream_.handle());
      rope_qk_store_seqs(qb.as<float>(), nq, kb.as<float>(), nk, dv.as<float>(), vw,
                         dpos.as<int32_t>(), p, both, stream_.handle());
      EXPECT_EQ(download(qb, q.size()), download(qa, q.size()));
      EXPECT_EQ(download(kb, k.size()), download(ka, k.size()));
      for (int64_t t = 0; t < n_tok; ++t) {
        for (int c = 0; c < 2; ++c) {
          const size_t w = c == 0 ? nk * hd : vw, at = static_cast<size_t>(pos[t]) * w;
          const std::vector<uint16_t> a = halves(caches[4 * t + c], at + w),
                                      b = halves(caches[4 * t + 2 + c], at + w);
          EXPECT_EQ(std::vector<uint16_t>(b.begin() + at, b.end()),
                    std::vector<uint16_t>(a.begin() + at, a.end()))
              << "sequence " << t << (c == 0 ? " keys" : " values");
        }
      }
    }
  }
}

// KV stores round to F16 exactly as the CPU cache; bias rows and the gated activation.
TEST_F(CudaTest, KvStoreBiasAndGluMatchCpu) {
  const int64_t n_tok = 3, kw = 256, vw = 128, n_ctx = 10;
  const std::vector<float> k = random_floats(n_tok * kw, 31), v = random_floats(n_tok * vw, 32);
  const std::vector<int32_t> pos = {4, 5, 9};
  std::vector<uint8_t> zeros(n_ctx * kw * 2, 0);
  DeviceBuffer dk = upload(k), dv = upload(v), dpos = upload(pos), kc = upload(zeros),
               vc = upload(zeros);
  store_kv_f16(dk.as<float>(), dv.as<float>(), n_tok, kw, vw, dpos.as<int32_t>(), kc.as<uint16_t>(),
               vc.as<uint16_t>(), stream_.handle());
  ASSERT_TRUE(stream_.synchronize());
  std::vector<uint16_t> kh(n_ctx * kw), vh(n_ctx * vw);
  ASSERT_TRUE(copy_to_host(kh.data(), kc.data(), kh.size() * 2));
  ASSERT_TRUE(copy_to_host(vh.data(), vc.data(), vh.size() * 2));
  int bad = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t c = 0; c < kw; ++c)
      bad += kh[pos[t] * kw + c] != quant::f32_to_fp16(k[t * kw + c]);
    for (int64_t c = 0; c < vw; ++c)
      bad += vh[pos[t] * vw + c] != quant::f32_to_fp16(v[t * vw + c]);
  }
  bad += kh[0] != 0 || vh[3 * vw] != 0;  // rows not stored stay
  EXPECT_EQ(bad, 0);

  const std::vector<float> b = random_floats(kw, 33);
  std::vector<float> want_b = k;
  for (int64_t t = 0; t < n_tok; ++t) compute::add(want_b.data() + t * kw, b.data(), kw);
  DeviceBuffer dbias = upload(b), drows = upload(k);
  add_rows(drows.as<float>(), dbias.as<float>(), n_tok, kw, stream_.handle());
  EXPECT_EQ(rel_l2(download(drows, k.size()), want_b), 0.0);

  const int64_t n = 5000;
  const std::vector<float> g = random_floats(n, 34, 3.0f), u = random_floats(n, 35);
  for (UnaryOp op : {UnaryOp::kSilu, UnaryOp::kGeluTanhFp16}) {
    std::vector<float> want = g;
    if (op == UnaryOp::kSilu)
      compute::silu(want.data(), n);
    else
      compute::gelu_tanh_fp16(want.data(), n);
    compute::mul(want.data(), u.data(), n);
    DeviceBuffer dg = upload(g), du = upload(u);
    glu(op, dg.as<float>(), du.as<float>(), n, stream_.handle());
    EXPECT_LE(rel_l2(download(dg, n), want), kFloatRelL2) << static_cast<int>(op);
  }
}

}  // namespace
}  // namespace hypura::compute::cuda
