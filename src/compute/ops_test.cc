// F32 helpers against float64 formulas (bounds: a few float ulps of the result scale).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compute/compute.h"
#include "compute/cpu/kernels.h"
#include "quant/fp16.h"

namespace hypura::compute {
namespace {

std::vector<float> random_vec(int64_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Ops, RmsNormMatchesFloat64) {
  const auto x = random_vec(4096, 3.0f, 1), w = random_vec(4096, 1.0f, 2);
  std::vector<float> out(4096);
  rms_norm(x.data(), w.data(), 4096, 1e-5f, out.data());
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double s = 1.0 / std::sqrt(ss / 4096 + 1e-5);
  for (int i = 0; i < 4096; ++i)
    EXPECT_NEAR(out[i], x[i] * s * w[i], 4e-7 * std::fabs(x[i] * s * w[i]) + 1e-30);
  std::vector<float> in_place = x;  // aliasing allowed
  rms_norm(in_place.data(), w.data(), 4096, 1e-5f, in_place.data());
  EXPECT_EQ(in_place, out);
}

TEST(Ops, SoftmaxIsStableAndNormalised) {
  std::vector<float> x = {1000.0f, 1001.0f, -INFINITY, 999.0f};
  softmax(x.data(), 4);
  const double e0 = std::exp(-1.0), e2 = std::exp(-2.0), z = 1 + e0 + e2;
  EXPECT_NEAR(x[0], e0 / z, 1e-7);
  EXPECT_NEAR(x[1], 1 / z, 1e-7);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_NEAR(x[3], e2 / z, 1e-7);
}

TEST(Ops, RopeNormalAndNeox) {
  const int64_t head_dim = 64, n_rot = 64, pos = 37;
  const float base = 10000.0f;
  for (bool neox : {false, true}) {
    auto x = random_vec(head_dim, 1.0f, 3);
    const auto orig = x;
    rope(x.data(), head_dim, n_rot, pos, base, 1.0f, nullptr, neox);
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double theta = pos * std::pow(static_cast<double>(base), -2.0 * i / n_rot);
      const int64_t a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
      const double ra = orig[a] * std::cos(theta) - orig[b] * std::sin(theta);
      const double rb = orig[a] * std::sin(theta) + orig[b] * std::cos(theta);
      EXPECT_NEAR(x[a], ra, 2e-5) << neox << " " << i;
      EXPECT_NEAR(x[b], rb, 2e-5) << neox << " " << i;
    }
  }
}

// YaRN against the formula in float64: dims below the correction range keep the original
// frequency, dims above it are interpolated, a ramp between; the magnitude scale applies.
TEST(Ops, RopeYarnMatchesFloat64) {
  const int64_t n_rot = 16, pos = 37;
  const float base = 10000.0f, fs = 0.25f, attn = 0.8f;
  const Yarn y = yarn(n_rot, 128, base, 32.0f, 1.0f, 1.0f, attn);
  EXPECT_EQ(y.corr_lo, 0.0f);  // floor(-0.39) clamped
  EXPECT_EQ(y.corr_hi, 3.0f);  // ceil(2.62)
  std::vector<float> x(n_rot);
  for (int64_t i = 0; i < n_rot; ++i) x[i] = 0.1f * static_cast<float>(i) - 0.7f;
  std::vector<float> got = x;
  rope_yarn(got.data(), n_rot, pos, base, fs, nullptr, y, /*neox=*/false);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double extrap = pos * std::pow(10000.0, -2.0 * i / n_rot);
    const double r = std::clamp((i - 0.0) / 3.0, 0.0, 1.0);
    const double theta = fs * extrap * r + extrap * (1 - r);
    const double m = attn * (1 + 0.1 * std::log(1 / fs));
    const double a = x[2 * i], b = x[2 * i + 1];
    EXPECT_NEAR(got[2 * i], (a * std::cos(theta) - b * std::sin(theta)) * m, 2e-5) << i;
    EXPECT_NEAR(got[2 * i + 1], (a * std::sin(theta) + b * std::cos(theta)) * m, 2e-5) << i;
  }
  // Without YaRN it is rope() exactly.
  std::vector<float> plain = x, off = x;
  rope(plain.data(), n_rot, n_rot, pos, base, fs, nullptr, true);
  rope_yarn(off.data(), n_rot, pos, base, fs, nullptr, Yarn{}, true);
  EXPECT_EQ(plain, off);
}

// The angles once, then any number of heads rotated by them: rope_yarn() bit for bit, with
// YaRN, frequency factors and both pair layouts.
TEST(Ops, RopeAnglesThenRotateIsRopeYarn) {
  const int64_t n_rot = 32;
  const Yarn y = yarn(n_rot, 4096, 150000.0f, 32.0f, 1.0f, 1.0f, 1.0f);
  std::vector<float> factors(n_rot / 2);
  for (int64_t i = 0; i < n_rot / 2; ++i) factors[i] = 1.0f + 0.25f * static_cast<float>(i % 3);
  for (bool neox : {false, true}) {
    for (const float* ff :
         {static_cast<const float*>(nullptr), static_cast<const float*>(factors.data())}) {
      for (int64_t pos : {0, 1, 77, 4000}) {
        std::vector<float> cs(n_rot);
        rope_yarn_angles(n_rot, pos, 150000.0f, 1.0f / 32, ff, y, cs.data());
        for (int head = 0; head < 3; ++head) {
          auto want = random_vec(n_rot, 2.0f, 10 + head);
          auto got = want;
          rope_yarn(want.data(), n_rot, pos, 150000.0f, 1.0f / 32, ff, y, neox);
          rope_rotate(got.data(), n_rot, cs.data(), neox);
          EXPECT_EQ(got, want) << "pos " << pos << " neox " << neox << " head " << head;
        }
      }
    }
  }
}

TEST(Ops, Activations) {
  auto x = random_vec(1000, 4.0f, 4);
  auto s = x, g = x, h = x;
  silu(s.data(), 1000);
  gelu_tanh(g.data(), 1000);
  gelu_tanh_fp16(h.data(), 1000);
  for (int i = 0; i < 1000; ++i) {
    const double v = x[i];
    EXPECT_NEAR(s[i], v / (1 + std::exp(-v)), 1e-6 * (1 + std::fabs(v)));
    const double gr = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(g[i], gr, 1e-6 * (1 + std::fabs(v)));
    EXPECT_NEAR(h[i], gr, 2e-3 * (1 + std::fabs(v)));  // fp16 input and output rounding
  }
}

// SwiGLU on every instruction set this CPU has (the SIMD exp and the scalar twin's
// std::exp) against float64: relative error <= 1e-6 (a few ulp), over inputs of standard
// deviation 100 (sigmoid saturated both ways: e^-|x| is clamped near 1e-38, so below about
// -87 the result is off by at most |x * up| * 1e-38) and lengths that leave a tail past the
// vectors.
TEST(Ops, SiluMulOfEveryPathMatchesFloat64) {
  for (const int64_t n : {1, 7, 8, 1003}) {
    const auto x = random_vec(n, 100.0f, 5), up = random_vec(n, 4.0f, 6);
    for (int l = 0; l < kSimdLevels; ++l) {
      const KernelTable* table = kernel_table(static_cast<SimdLevel>(l));
      if (table == nullptr) continue;
      auto got = x;
      table->silu_mul(got.data(), up.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double v = x[i], want = v / (1 + std::exp(-v)) * up[i];
        EXPECT_NEAR(got[i], want, 1e-6 * std::fabs(want) + 1e-36 * std::fabs(v * up[i]))
            << table->name << " x " << v << " n " << n;
      }
    }
  }
}

// gelu_mul on every instruction set this CPU has gives the scalar twin's bits: at every
// finite fp16 value and beside it, at the +-10 edges, infinities and NaN, over lengths that
// leave a tail past the vectors.
TEST(Ops, GeluMulOfEveryPathIsTheScalarTwin) {
  std::vector<float> x = {-10.0f,   std::nextafter(-10.0f, 0.0f),
                          10.0f,    std::nextafter(10.0f, 0.0f),
                          INFINITY, -INFINITY,
                          NAN,      1e30f,
                          -1e30f,   0.0f,
                          -0.0f};
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float h = quant::fp16_to_f32(static_cast<uint16_t>(bits));
    if (!std::isfinite(h)) continue;
    x.push_back(h);
    x.push_back(std::nextafter(h, 0.0f));
  }
  const auto up = random_vec(static_cast<int64_t>(x.size()), 2.0f, 7);
  for (const int64_t n : {int64_t{5}, int64_t{13}, static_cast<int64_t>(x.size())}) {
    std::vector<float> want(x.begin(), x.begin() + n);
    ref::gelu_mul(want.data(), up.data(), n);
    for (int l = 0; l < kSimdLevels; ++l) {
      const KernelTable* table = kernel_table(static_cast<SimdLevel>(l));
      if (table == nullptr) continue;
      std::vector<float> got(x.begin(), x.begin() + n);
      table->gelu_mul(got.data(), up.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << table->name << " x " << x[i];
        } else {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
              << table->name << " x " << x[i] << " up " << up[i];
        }
      }
    }
  }
}

// The table behind gelu_tanh_fp16 gives what rounding, the formula and rounding again give,
// bit for bit, at every fp16 value and between them; outside (-10, 10) it is 0 or x.
TEST(Ops, GeluFp16IsTheRoundedFormulaEverywhere) {
  std::vector<float> x;
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float h = quant::fp16_to_f32(static_cast<uint16_t>(bits));
    if (!std::isfinite(h)) continue;
    x.push_back(h);
    x.push_back(std::nextafter(h, 0.0f));  // rounds to h or its neighbour
  }
  std::vector<float> got = x;
  gelu_tanh_fp16(got.data(), static_cast<int64_t>(got.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    float want = v;
    if (v <= -10.0f) {
      want = 0.0f;
    } else if (v < 10.0f) {
      const float h = quant::fp16_to_f32(quant::f32_to_fp16(v));
      const float g =
          0.5f * h *
          (1.0f + std::tanh(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
      want = quant::fp16_to_f32(quant::f32_to_fp16(g));
    }
    ASSERT_EQ(std::memcmp(&got[i], &want, sizeof(float)), 0) << "x = " << v;
  }
}

TEST(Ops, Elementwise) {
  std::vector<float> y = {1, 2, 3}, x = {4, 5, 6};
  add(y.data(), x.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{5, 7, 9}));
  mul(y.data(), x.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{20, 35, 54}));
  scale(y.data(), 0.5f, 3);
  EXPECT_EQ(y, (std::vector<float>{10, 17.5f, 27}));
  EXPECT_EQ(dot_f32(x.data(), x.data(), 3), 77.0f);
}

}  // namespace
}  // namespace hypura::compute

namespace hypura::compute {
namespace {

// MoE routing's order: largest first, the lower index on ties.
TEST(TopK, LargestFirstLowerIndexOnTies) {
  const float x[6] = {0.1f, 0.7f, 0.3f, 0.7f, -1.0f, 0.3f};
  int32_t out[4];
  top_k(x, 6, 4, out);
  EXPECT_EQ(std::vector<int32_t>(out, out + 4), (std::vector<int32_t>{1, 3, 2, 5}));
  top_k(x, 6, 1, out);
  EXPECT_EQ(out[0], 1);
}

}  // namespace
}  // namespace hypura::compute
