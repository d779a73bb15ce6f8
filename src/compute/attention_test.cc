// Attention kernel tests: every dispatch path this CPU has against a float64 softmax
// attention over the same keys and values, the online steps against one softmax over all
// keys, masks, head sizes that are not multiples of 8, and row independence (a row's
// result does not depend on the other rows of its step, which is what batch invariance
// of the model's attention rests on).
//
// Error bound (named): rel L2 of the normalised output acc / l against float64 <= 2e-6
// for head sizes up to 256 (float scores, float exps: a few ulps per term, summed over
// at most a few hundred keys).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compute/compute.h"
#include "compute/cpu/kernels.h"
#include "quant/fp16.h"

namespace hypura::compute {
namespace {

constexpr double kRelL2 = 2e-6;

std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> levels;
  for (int l = 0; l < kSimdLevels; ++l) {
    if (cpu_supports(static_cast<SimdLevel>(l))) levels.push_back(static_cast<SimdLevel>(l));
  }
  return levels;
}

// Keys and values of one head at positions [0, n_pos), and query rows, random.
struct Problem {
  int64_t d, dv, n_pos, n_rows;
  std::vector<float> q;              // (n_rows, d)
  std::vector<float> keys;           // (n_pos, d)
  std::vector<float> vals;           // (n_pos, dv)
  std::vector<int32_t> first, last;  // (n_rows) visible positions [first, last]

  Problem(int64_t d_, int64_t dv_, int64_t n_pos_, int64_t n_rows_, uint32_t seed, float spread)
      : d(d_), dv(dv_), n_pos(n_pos_), n_rows(n_rows_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::uniform_int_distribution<int32_t> pos(0, static_cast<int32_t>(n_pos - 1));
    q.resize(n_rows * d);
    keys.resize(n_pos * d);
    vals.resize(n_pos * dv);
    for (auto& x : q) x = n(rng) * spread;
    for (auto& x : keys) x = n(rng);
    for (auto& x : vals) x = n(rng);
    for (int64_t r = 0; r < n_rows; ++r) {
      int32_t a = pos(rng), b = pos(rng);
      if (a > b) std::swap(a, b);
      first.push_back(r % 3 == 0 ? 0 : a);  // some rows see every key up to their own
      last.push_back(r == 0 ? static_cast<int32_t>(n_pos - 1) : b);
    }
  }

  // Float64 softmax attention of row r over its visible positions.
  std::vector<double> expected(int64_t r, float scale) const {
    std::vector<double> s;
    double mx = -INFINITY;
    for (int32_t j = first[r]; j <= last[r]; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += double(q[r * d + c]) * keys[j * d + c];
      s.push_back(dot * scale);
      mx = std::max(mx, s.back());
    }
    std::vector<double> out(dv, 0.0);
    double sum = 0;
    for (int32_t j = first[r]; j <= last[r]; ++j) {
      const double e = std::exp(s[j - first[r]] - mx);
      sum += e;
      for (int64_t c = 0; c < dv; ++c) out[c] += e * vals[j * dv + c];
    }
    for (auto& x : out) x /= sum;
    return out;
  }
};

// Runs the problem through `table` in key blocks of kAttnMaxKeys; returns acc / l. With
// f16_values the step reads the values as F16 rows (they must be F16 values already).
std::vector<float> run(const KernelTable& table, const Problem& p, float scale,
                       bool f16_values = false) {
  std::vector<uint16_t> vals16;
  for (float v : p.vals) vals16.push_back(quant::f32_to_fp16(v));
  std::vector<const float*> qs;
  for (int64_t r = 0; r < p.n_rows; ++r) qs.push_back(p.q.data() + r * p.d);
  std::vector<int32_t> lo(p.n_rows), hi(p.n_rows);
  std::vector<float> m(p.n_rows, -INFINITY), acc(p.n_rows * p.dv, 0.0f);
  std::vector<double> l(p.n_rows, 0.0);
  const AttentionRows rows{p.n_rows,  p.d,       p.dv,     scale,    qs.data(),
                           lo.data(), hi.data(), m.data(), l.data(), acc.data()};
  for (int64_t kb = 0; kb < p.n_pos; kb += kAttnMaxKeys) {
    const int64_t n_keys = std::min(kAttnMaxKeys, p.n_pos - kb);
    for (int64_t r = 0; r < p.n_rows; ++r) {
      const int64_t j0 = std::max<int64_t>(kb, p.first[r]);
      const int64_t j1 = std::min<int64_t>(kb + n_keys, p.last[r] + 1);
      lo[r] = static_cast<int32_t>(j0 - kb);
      hi[r] = static_cast<int32_t>(std::max(j0, j1) - kb);
    }
    // Scratch as the model uses it: kAttnMaxKeys keys, only n_keys of them current.
    std::vector<float> kbuf(kAttnMaxKeys * p.d, 7.0f), vbuf(kAttnMaxKeys * p.dv, 7.0f);
    table.widen_keys(KvRows{p.keys.data() + kb * p.d, p.d, false}, n_keys, p.d, kbuf.data());
    std::copy(p.vals.begin() + kb * p.dv, p.vals.begin() + (kb + n_keys) * p.dv, vbuf.begin());
    const KvRows values = f16_values ? KvRows{vals16.data() + kb * p.dv, p.dv, true}
                                     : KvRows{vbuf.data(), p.dv, false};
    table.attention_step(rows, kbuf.data(), values, n_keys);
  }
  for (int64_t r = 0; r < p.n_rows; ++r) {
    for (int64_t c = 0; c < p.dv; ++c)
      acc[r * p.dv + c] = static_cast<float>(acc[r * p.dv + c] / l[r]);
  }
  return acc;
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& want, int64_t off) {
  double num = 0, den = 0;
  for (size_t c = 0; c < want.size(); ++c) {
    num += (got[off + c] - want[c]) * (got[off + c] - want[c]);
    den += want[c] * want[c];
  }
  return std::sqrt(num / den);
}

TEST(Attention, EveryPathMatchesFloat64) {
  struct Shape {
    int64_t d, dv, n_pos, n_rows;
    float spread;
  };
  const Shape shapes[] = {{64, 64, 200, 9, 1.0f},   {128, 128, 700, 8, 0.5f},
                          {256, 256, 130, 4, 0.3f}, {64, 64, 64, 3, 4.0f},
                          {40, 24, 150, 5, 1.0f},   {64, 128, 333, 6, 2.0f}};
  uint32_t seed = 1;
  for (const Shape& sh : shapes) {
    const Problem p(sh.d, sh.dv, sh.n_pos, sh.n_rows, seed++, sh.spread);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sh.d));
    for (SimdLevel level : supported_levels()) {
      const std::vector<float> got = run(*kernel_table(level), p, scale);
      for (int64_t r = 0; r < p.n_rows; ++r) {
        EXPECT_LE(rel_l2(got, p.expected(r, scale), r * p.dv), kRelL2)
            << simd_level_name(level) << " d=" << sh.d << " dv=" << sh.dv << " row " << r;
      }
    }
  }
}

// A row computed alone, or among other rows with other masks, gives the same bits: also
// where a tile holds it with up to three neighbours (keys and values loaded once for all;
// shared, partly shared and disjoint key ranges), for head sizes with a half-vector tail
// (40, 24) and values wider than one register pass (256).
TEST(Attention, RowsAreIndependent) {
  for (const Problem& all : {Problem(64, 64, 300, 12, 7, 1.5f), Problem(40, 24, 150, 7, 8, 1.0f),
                             Problem(256, 256, 130, 5, 9, 0.5f)}) {
    for (SimdLevel level : supported_levels()) {
      const std::vector<float> together = run(*kernel_table(level), all, 0.125f);
      for (int64_t r = 0; r < all.n_rows; ++r) {
        Problem one = all;
        one.n_rows = 1;
        one.q.assign(all.q.begin() + r * all.d, all.q.begin() + (r + 1) * all.d);
        one.first = {all.first[r]};
        one.last = {all.last[r]};
        const std::vector<float> alone = run(*kernel_table(level), one, 0.125f);
        for (int64_t c = 0; c < all.dv; ++c) {
          ASSERT_EQ(alone[c], together[r * all.dv + c])
              << simd_level_name(level) << " d=" << all.d << " row " << r;
        }
      }
    }
  }
}

TEST(Attention, WidenRowsIsExact) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> bits(0, 0xffff);
  const int64_t n_rows = 5, width = 70, stride = 100;
  std::vector<uint16_t> h(n_rows * stride);
  for (auto& x : h) {
    do x = static_cast<uint16_t>(bits(rng));
    while ((x & 0x7c00) == 0x7c00);  // finite
  }
  std::vector<float> f(n_rows * stride);
  for (size_t i = 0; i < f.size(); ++i) f[i] = quant::fp16_to_f32(h[i]);
  for (SimdLevel level : supported_levels()) {
    std::vector<float> out(n_rows * width, -1.0f), out32(n_rows * width, -1.0f);
    kernel_table(level)->widen_rows(KvRows{h.data(), stride, true}, n_rows, width, out.data());
    kernel_table(level)->widen_rows(KvRows{f.data(), stride, false}, n_rows, width, out32.data());
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t c = 0; c < width; ++c) {
        ASSERT_EQ(out[r * width + c], f[r * stride + c]) << simd_level_name(level);
        ASSERT_EQ(out32[r * width + c], f[r * stride + c]) << simd_level_name(level);
      }
    }
  }
}

// Keys widened transposed: every element exact, in its column, for whole and partial
// groups of 8 keys and head sizes with and without a vector tail; columns past the keys
// are left untouched.
TEST(Attention, WidenKeysTransposesExactly) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> bits(0, 0xffff);
  const int64_t stride = 600;
  std::vector<uint16_t> h(kAttnMaxKeys * stride);
  for (auto& x : h) {
    do x = static_cast<uint16_t>(bits(rng));
    while ((x & 0x7c00) == 0x7c00);  // finite
  }
  std::vector<float> f(h.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = quant::fp16_to_f32(h[i]);
  for (const int64_t d : {64, 40, 576, 20}) {
    for (const int64_t n_keys : {64, 61, 8, 3}) {
      for (SimdLevel level : supported_levels()) {
        for (const bool f16 : {true, false}) {
          std::vector<float> out(kAttnMaxKeys * d, -1.0f);
          const KvRows src = f16 ? KvRows{h.data(), stride, true} : KvRows{f.data(), stride, false};
          kernel_table(level)->widen_keys(src, n_keys, d, out.data());
          for (int64_t c = 0; c < d; ++c) {
            for (int64_t j = 0; j < kAttnMaxKeys; ++j) {
              ASSERT_EQ(out[c * kAttnMaxKeys + j], j < n_keys ? f[j * stride + c] : -1.0f)
                  << simd_level_name(level) << " d=" << d << " n_keys=" << n_keys << " f16=" << f16;
            }
          }
        }
      }
    }
  }
}

// Values read from F16 rows (a decode step reading the cache) or widened first (a prompt
// tile) give the same bits on every path: widening is exact.
TEST(Attention, F16ValuesAsWidened) {
  for (Problem p : {Problem(64, 64, 300, 3, 21, 1.5f), Problem(40, 24, 150, 5, 22, 1.0f),
                    Problem(576, 512, 140, 4, 23, 0.3f)}) {
    for (float& v : p.vals) v = quant::fp16_to_f32(quant::f32_to_fp16(v));
    for (SimdLevel level : supported_levels()) {
      const std::vector<float> widened = run(*kernel_table(level), p, 0.125f);
      const std::vector<float> f16 = run(*kernel_table(level), p, 0.125f, true);
      for (size_t i = 0; i < widened.size(); ++i) {
        ASSERT_EQ(widened[i], f16[i]) << simd_level_name(level) << " d=" << p.d << " at " << i;
      }
    }
  }
}

// The two SIMD levels do the same FMAs in the same order: their outputs agree bit for bit.
TEST(Attention, SimdLevelsAgreeBitForBit) {
  if (!cpu_supports(SimdLevel::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (const Problem& p :
       {Problem(64, 64, 300, 13, 11, 1.5f), Problem(256, 256, 130, 6, 12, 0.5f),
        Problem(576, 512, 140, 5, 13, 0.3f), Problem(40, 24, 150, 7, 14, 1.0f)}) {
    const std::vector<float> avx2 = run(*kernel_table(SimdLevel::kAvx2), p, 0.125f);
    const std::vector<float> avx512 = run(*kernel_table(SimdLevel::kAvx512), p, 0.125f);
    for (size_t i = 0; i < avx2.size(); ++i)
      ASSERT_EQ(avx2[i], avx512[i]) << "d=" << p.d << " at " << i;
  }
}

}  // namespace
}  // namespace hypura::compute
