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
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compute/compute.h"
#include "compute/cuda/attention.h"
#include "compute/cuda/binary.h"
#include "compute/cuda/device.h"
#include "compute/cuda/matvec.h"
#include "compute/cuda/matvec_impl_config.h"
#include "compute/cuda/norm.h"
#include "compute/cuda/quantize.h"
#include "compute/cuda/rope.h"
#include "compute/cuda/softmax.h"
#include "compute/cuda/unary.h"
#include "quant/fp16.h"
#include "quant/quant.h"

namespace hypura::compute::cuda {
namespace {

using gguf::GgmlType;

constexpr double kMatvecRelL2 = 1e-5;
constexpr double kFloatRelL2 = 1e-6;
constexpr double kAttnRelL2 = 1e-5;

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
  x[3] = 2.5f, x[9] = -2.5f;          // a tie of |max| inside one 32-block and one 256-block
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
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                            GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                            GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                            GgmlType::Q6_K};
  Context cpu(1, "scalar");
  uint32_t seed = 100;
  for (GgmlType type : types) {
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
    for (const MatvecShape& sh : shapes) {
      SCOPED_TRACE(std::string(gguf::type_name(type)) + " " + std::to_string(sh.n_rows) + "x" +
                   std::to_string(sh.n_cols) + " config " + std::to_string(sh.config));
      const size_t row = quant::row_size(type, sh.n_cols);
      std::vector<uint8_t> w(row * sh.n_rows);
      for (int64_t r = 0; r < sh.n_rows; ++r) {
        const std::vector<float> wf = random_floats(sh.n_cols, seed++, 0.05f);
        quant::quantize_row_ref(type, wf.data(), w.data() + r * row, sh.n_cols);
      }
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
  const int64_t rows = 5, n = 4096;
  const std::vector<float> x = random_floats(rows * n, 1), w = random_floats(n, 2);
  for (bool with_w : {true, false}) {
    std::vector<float> want(rows * n);
    for (int64_t r = 0; r < rows; ++r) {
      compute::rms_norm(x.data() + r * n, with_w ? w.data() : nullptr, n, 1e-5f, want.data() + r * n);
    }
    DeviceBuffer dx = upload(x), dw = upload(w), dy = poisoned(rows * n);
    cuda::rms_norm(dx.as<float>(), with_w ? dw.as<float>() : nullptr, rows, n, 1e-5f,
                   dy.as<float>(), stream_.handle());
    EXPECT_LE(rel_l2(download(dy, rows * n), want), kFloatRelL2);
  }
}

TEST_F(CudaTest, SoftmaxMatchesCpuWithMaskedEntries) {
  const int64_t rows = 4, n = 1000;
  std::vector<float> x = random_floats(rows * n, 3, 4.0f);
  for (int64_t i = 0; i < n; i += 3) x[i] = -INFINITY;  // row 0 partly masked
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
    for (bool with_ff : {false, true}) {
      const int64_t n_rot = with_ff ? head_dim / 2 : head_dim;  // partial rotation with factors
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
      EXPECT_LE(rel_l2(download(dx, x.size()), want), kFloatRelL2) << neox << with_ff;
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
  for (const Case& c : {Case{UnaryOp::kSilu, compute::silu}, Case{UnaryOp::kGeluTanh, compute::gelu_tanh},
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

// Decode attention over an F16 cache against the CPU's math (softmax of scaled dots,
// weighted sum of widened V), GQA and a window that starts past position 0.
TEST_F(CudaTest, AttentionDecodeMatchesCpu) {
  struct Case {
    int64_t n_head, n_head_kv, head_dim, kv_first, kv_end;
  };
  // GQA groups of 4, 1, 2, 12 (two blocks of q heads) and 3; head_dim 128, 64, 256 and 96
  // (lanes per key not a power of two); one key; windows not starting at 0; short contexts
  // (shortened segments) and long ones.
  for (const Case& c : {Case{8, 2, 128, 100, 1000}, Case{4, 4, 64, 0, 1}, Case{2, 1, 256, 0, 300},
                        Case{32, 8, 128, 0, 4096}, Case{12, 1, 128, 0, 700}, Case{6, 2, 96, 5, 333},
                        Case{32, 8, 128, 0, 20000}}) {
    SCOPED_TRACE(std::to_string(c.head_dim) + " " + std::to_string(c.kv_end));
    const int64_t n_ctx = c.kv_end, width = c.n_head_kv * c.head_dim;
    const std::vector<float> q = random_floats(c.n_head * c.head_dim, 8);
    const std::vector<float> kf = random_floats(n_ctx * width, 9), vf = random_floats(n_ctx * width, 10);
    std::vector<uint16_t> k(kf.size()), v(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) k[i] = quant::f32_to_fp16(kf[i]);
    for (size_t i = 0; i < vf.size(); ++i) v[i] = quant::f32_to_fp16(vf[i]);
    const float kq_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

    std::vector<float> want(c.n_head * c.head_dim, 0.0f);
    const int64_t group = c.n_head / c.n_head_kv, n_kv = c.kv_end - c.kv_first;
    std::vector<float> p(n_kv);
    for (int64_t h = 0; h < c.n_head; ++h) {
      const int64_t kvh = h / group;
      for (int64_t j = 0; j < n_kv; ++j) {
        float dot = 0.0f;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          dot += q[h * c.head_dim + d] *
                 quant::fp16_to_f32(k[(c.kv_first + j) * width + kvh * c.head_dim + d]);
        }
        p[j] = dot * kq_scale;
      }
      compute::softmax(p.data(), n_kv);
      for (int64_t j = 0; j < n_kv; ++j) {
        for (int64_t d = 0; d < c.head_dim; ++d) {
          want[h * c.head_dim + d] +=
              p[j] * quant::fp16_to_f32(v[(c.kv_first + j) * width + kvh * c.head_dim + d]);
        }
      }
    }
    DeviceBuffer dq = upload(q), dk = upload(k), dv = upload(v), dout = poisoned(want.size());
    auto scratch = DeviceBuffer::allocate(attention_scratch_bytes(c.n_head, c.n_head_kv, c.head_dim, n_kv));
    ASSERT_TRUE(scratch.is_ok());
    AttnDecodeArgs a;
    a.q = dq.as<float>();
    a.k = dk.as<uint16_t>();
    a.v = dv.as<uint16_t>();
    a.out = dout.as<float>();
    a.n_head = c.n_head;
    a.n_head_kv = c.n_head_kv;
    a.head_dim = a.head_dim_v = c.head_dim;
    a.k_stride = a.v_stride = width;
    a.kv_first = c.kv_first;
    a.kv_end = c.kv_end;
    a.kq_scale = kq_scale;
    attention_decode(a, scratch->data(), stream_.handle());
    EXPECT_LE(rel_l2(download(dout, want.size()), want), kAttnRelL2);
  }
}

}  // namespace
}  // namespace hypura::compute::cuda
