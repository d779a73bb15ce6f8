// Tests of the block formats: dequantization and the legacy quantizers against gguf-py's
// numpy implementation (bit-exact), K-quant quantizers by round-trip error bounds, and
// the activation quantizers' invariants.
#include "quant/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "quant/fp16.h"

namespace hypura::quant {
namespace {

namespace fs = std::filesystem;

struct TypeCase {
  GgmlType type;
  const char* name;
  std::vector<int> half_offsets;  // byte offsets of fp16 scale fields inside a block
};

const std::vector<TypeCase>& all_cases() {
  static const std::vector<TypeCase> cases = {
      {GgmlType::F16, "F16", {}},       {GgmlType::BF16, "BF16", {}},
      {GgmlType::Q4_0, "Q4_0", {0}},    {GgmlType::Q4_1, "Q4_1", {0, 2}},
      {GgmlType::Q5_0, "Q5_0", {0}},    {GgmlType::Q5_1, "Q5_1", {0, 2}},
      {GgmlType::Q8_0, "Q8_0", {0}},    {GgmlType::Q2_K, "Q2_K", {80, 82}},
      {GgmlType::Q3_K, "Q3_K", {108}},  {GgmlType::Q4_K, "Q4_K", {0, 2}},
      {GgmlType::Q5_K, "Q5_K", {0, 2}}, {GgmlType::Q6_K, "Q6_K", {208}},
      {GgmlType::MXFP4, "MXFP4", {}},  // every E8M0 byte, subnormal and overflowing scales too
  };
  return cases;
}

// A finite half in +-[2^-20, 2^3]: normal and subnormal scales, never inf or nan.
uint16_t random_half(std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(-20.0f, 3.0f);
  const float v = std::exp2(mag(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
  return f32_to_fp16(v);
}

// n_blocks random blocks of `c` (n_blocks * block_size elements), scales finite.
std::vector<uint8_t> random_blocks(const TypeCase& c, int64_t n_elems, std::mt19937& rng) {
  std::vector<uint8_t> bytes(row_size(c.type, n_elems));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  if (c.type == GgmlType::F16 || c.type == GgmlType::BF16) {
    for (int64_t i = 0; i < n_elems; ++i) {
      const uint16_t h = c.type == GgmlType::F16
                             ? random_half(rng)
                             : f32_to_bf16(std::ldexp(static_cast<float>(rng() % 2000) - 1000.0f,
                                                      static_cast<int>(rng() % 60) - 40));
      std::memcpy(&bytes[static_cast<size_t>(i) * 2], &h, 2);
    }
    return bytes;
  }
  const int64_t bs = type_size(c.type);
  for (size_t b = 0; b < bytes.size() / bs; ++b) {
    for (int off : c.half_offsets) {
      const uint16_t h = random_half(rng);
      std::memcpy(&bytes[b * bs + off], &h, 2);
    }
  }
  return bytes;
}

template <class T>
void write_file(const fs::path& p, const std::vector<T>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(T)));
}

template <class T>
std::vector<T> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<T> v(raw.size() / sizeof(T));
  std::memcpy(v.data(), raw.data(), v.size() * sizeof(T));
  return v;
}

bool python_available() {
  return fs::exists(HYPURA_PYTHON);
}

int run_crosscheck(const fs::path& dir, const std::string& types) {
  const std::string cmd = std::string(HYPURA_PYTHON) + " " + HYPURA_SOURCE_DIR +
                          "/tests/python/quant_crosscheck.py " + dir.string() + " " + types;
  return std::system(cmd.c_str());
}

fs::path fresh_dir(const char* tag) {
  fs::path dir = fs::temp_directory_path() /
                 (std::string("hypura_quant_") + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    if ((half & 0x7c00) == 0x7c00 && (half & 0x3ff)) continue;  // nan payloads
    ASSERT_EQ(f32_to_fp16(fp16_to_f32(half)), half) << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_fp16(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even (down)
  EXPECT_EQ(f32_to_fp16(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);            // overflow to inf
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie below smallest subnormal
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.5f, -24)), 0x0002);  // tie between 1 and 2 -> 2
}

// Every supported type: our dequantize_row == gguf-py's numpy dequantize, bit for bit.
TEST(Dequantize, MatchesGgufPyBitExact) {
  if (!python_available()) GTEST_SKIP() << "no " << HYPURA_PYTHON;
  std::mt19937 rng(1);  // fixed: failures reproduce
  const fs::path dir = fresh_dir("deq");
  const int64_t n = 256 * 24;
  std::string names;
  std::vector<std::vector<uint8_t>> blocks;
  for (const auto& c : all_cases()) {
    blocks.push_back(random_blocks(c, n, rng));
    write_file(dir / (std::string(c.name) + ".blocks"), blocks.back());
    names += std::string(" ") + c.name;
  }
  ASSERT_EQ(run_crosscheck(dir, names), 0);
  std::vector<float> ours(n);
  for (size_t i = 0; i < all_cases().size(); ++i) {
    const auto& c = all_cases()[i];
    const auto theirs = read_file<float>(dir / (std::string(c.name) + ".deq"));
    ASSERT_EQ(theirs.size(), static_cast<size_t>(n)) << c.name;
    dequantize_row(c.type, blocks[i].data(), ours.data(), n);
    int mismatches = 0;
    for (int64_t k = 0; k < n; ++k) {
      if (float_bits(ours[k]) != float_bits(theirs[k]) && mismatches++ < 5) {
        ADD_FAILURE() << c.name << " element " << k << ": ours " << ours[k] << " gguf-py "
                      << theirs[k];
      }
    }
    EXPECT_EQ(mismatches, 0) << c.name;
  }
  fs::remove_all(dir);
}

// Legacy weight quantizers: identical bytes to gguf-py's quantize on random rows.
TEST(QuantizeLegacy, MatchesGgufPyBitExact) {
  if (!python_available()) GTEST_SKIP() << "no " << HYPURA_PYTHON;
  std::mt19937 rng(2);  // fixed: failures reproduce
  const fs::path dir = fresh_dir("q");
  const int64_t n = 32 * 256;
  std::vector<float> x(n);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // an all-zero block (d = 0 path)
  const std::vector<std::pair<GgmlType, const char*>> types = {
      {GgmlType::Q4_0, "Q4_0"},  {GgmlType::Q4_1, "Q4_1"}, {GgmlType::Q5_0, "Q5_0"},
      {GgmlType::Q5_1, "Q5_1"},  {GgmlType::Q8_0, "Q8_0"}, {GgmlType::BF16, "BF16"},
      {GgmlType::MXFP4, "MXFP4"}};
  std::string names;
  for (const auto& [type, name] : types) {
    write_file(dir / (std::string(name) + ".f32"), x);
    names += std::string(" ") + name;
  }
  ASSERT_EQ(run_crosscheck(dir, names), 0);
  for (const auto& [type, name] : types) {
    const auto theirs = read_file<uint8_t>(dir / (std::string(name) + ".quant"));
    std::vector<uint8_t> ours(row_size(type, n));
    quantize_row_ref(type, x.data(), ours.data(), n);
    ASSERT_EQ(theirs.size(), ours.size()) << name;
    EXPECT_EQ(std::memcmp(theirs.data(), ours.data(), ours.size()), 0) << name;
  }
  fs::remove_all(dir);
}

// MXFP4: a block whose largest code is +-6 (doubled: 12) and that has no -0 code comes
// back byte for byte from its dequantized values (the scale is recovered from amax).
TEST(QuantizeMxfp4, RoundTripsDequantizedBlocks) {
  std::mt19937 rng(5);  // fixed: failures reproduce
  const int64_t n = 32 * 512;
  std::vector<BlockMXFP4> blocks(n / 32), back(n / 32);
  for (auto& b : blocks) {
    b.e = static_cast<uint8_t>(2 + rng() % 250);
    for (auto& q : b.qs) {
      q = static_cast<uint8_t>(rng());
      if ((q & 0xF) == 8) q ^= 0x1;  // -0 would come back as +0
      if ((q >> 4) == 8) q ^= 0x10;
    }
    b.qs[rng() % 16] = static_cast<uint8_t>((rng() & 1) ? 0x7F : 0xF0);  // a +-6
  }
  std::vector<float> x(n);
  dequantize_row(GgmlType::MXFP4, blocks.data(), x.data(), n);
  quantize_row_ref(GgmlType::MXFP4, x.data(), back.data(), n);
  EXPECT_EQ(std::memcmp(blocks.data(), back.data(), sizeof(BlockMXFP4) * blocks.size()), 0);
}

// MXFP4 of N(0, 1) rows: every value within half a code step of its scale (steps grow to
// 2 units of the scale between 4 and 6) or clipped at 6 units, zero blocks stay zero.
TEST(QuantizeMxfp4, RoundTripWithinBound) {
  std::mt19937 rng(6);  // fixed: failures reproduce
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t n = 32 * 256;
  std::vector<float> x(n), back(n);
  for (auto& v : x) v = dist(rng);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;
  std::vector<BlockMXFP4> q(n / 32);
  quantize_row_ref(GgmlType::MXFP4, x.data(), q.data(), n);
  dequantize_row(GgmlType::MXFP4, q.data(), back.data(), n);
  double err2 = 0, x2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float unit = 2.0f * e8m0_half_to_f32(q[i / 32].e);  // one E2M1 unit
    const float err = std::fabs(back[i] - x[i]);
    if (std::fabs(x[i]) <= 6.0f * unit) {
      ASSERT_LE(err, std::fabs(x[i]) >= 4.0f * unit ? unit : 0.5f * unit) << i;
    } else {
      ASSERT_EQ(std::fabs(back[i]), 6.0f * unit) << i;
    }
    err2 += static_cast<double>(err) * err;
    x2 += static_cast<double>(x[i]) * x[i];
  }
  EXPECT_LT(std::sqrt(err2 / x2), 0.2);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(back[i], 0.0f);
}

// K-quant quantizers: each value round-trips within the bound stated in quantize_k.cc,
// i.e. half a sub-block step plus (asymmetric formats) one min step, and the whole row
// keeps a relative RMS error typical of its bit width.
struct KCase {
  GgmlType type;
  int sub_len;  // elements per sub-block
  int nmax;     // largest quant value after offset (range / step)
  bool asym;
  double max_rel_rms;  // RMS error / RMS of x for N(0,1) data
};

TEST(QuantizeK, RoundTripWithinBound) {
  std::mt19937 rng(3);  // fixed: failures reproduce
  const std::vector<KCase> cases = {{GgmlType::Q2_K, 16, 3, true, 0.45},
                                    {GgmlType::Q3_K, 16, 7, false, 0.25},
                                    {GgmlType::Q4_K, 32, 15, true, 0.12},
                                    {GgmlType::Q5_K, 32, 31, true, 0.06},
                                    {GgmlType::Q6_K, 16, 63, false, 0.03}};
  const int64_t n = 256 * 64;
  std::vector<float> x(n), back(n);
  for (const auto& c : cases) {
    std::normal_distribution<float> dist(0.3f, 1.0f);
    for (auto& v : x) v = dist(rng);
    for (int i = 0; i < 256; ++i) x[i] = 0.0f;                 // an all-zero block
    for (int i = 256; i < 512; ++i) x[i] = 1e-3f * dist(rng);  // a tiny block
    std::vector<uint8_t> q(row_size(c.type, n));
    quantize_row_ref(c.type, x.data(), q.data(), n);
    dequantize_row(c.type, q.data(), back.data(), n);
    double err2 = 0, x2 = 0;
    for (int64_t s = 0; s < n / c.sub_len; ++s) {
      float lo = 0, hi = 0;
      for (int l = 0; l < c.sub_len; ++l) {
        lo = std::min(lo, x[s * c.sub_len + l]);
        hi = std::max(hi, x[s * c.sub_len + l]);
      }
      const float range = c.asym ? hi - lo : 2 * std::max(-lo, hi);
      // Step <= range / nmax rounded up twice (fp16 super-scale, integer sub-scale): allow
      // 0.5 step + 1/63 of the block's largest range for the scale rounding and min step.
      const float block_bound_extra = 0.1f * range;
      for (int l = 0; l < c.sub_len; ++l) {
        const int64_t i = s * c.sub_len + l;
        const float err = std::fabs(back[i] - x[i]);
        ASSERT_LE(err, 0.5f * range / c.nmax + block_bound_extra + 1e-6f)
            << static_cast<int>(c.type) << " element " << i;
        err2 += static_cast<double>(err) * err;
        x2 += static_cast<double>(x[i]) * x[i];
      }
    }
    EXPECT_LT(std::sqrt(err2 / x2), c.max_rel_rms) << static_cast<int>(c.type);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(back[i], 0.0f);
  }
}

// Activation quantizers: dequantized values within half a step; Q8_K's bsums are the sums.
TEST(QuantizeActivations, Q8Formats) {
  std::mt19937 rng(4);  // fixed: failures reproduce
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const int64_t n = 1024;
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  std::vector<BlockQ8_K> k(n / 256);
  quantize_row_q8_k(x.data(), k.data(), n);
  std::vector<BlockQ8_0> q0(n / 32);
  quantize_row_q8_0(x.data(), q0.data(), n);
  std::vector<BlockQ8_1> q1(n / 32);
  quantize_row_q8_1(x.data(), q1.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const BlockQ8_K& b = k[i / 256];
    EXPECT_NEAR(b.d * b.qs[i % 256], x[i], std::fabs(b.d) * 0.5f + 1e-6f);
    const float d0 = fp16_to_f32(q0[i / 32].d);
    // Half a step plus the fp16 rounding of d (at most 127 * d * 2^-11).
    EXPECT_NEAR(d0 * q0[i / 32].qs[i % 32], x[i], d0 * (0.5f + 127.0f / 2048) + 1e-6f);
    EXPECT_EQ(q1[i / 32].qs[i % 32], q0[i / 32].qs[i % 32]);
  }
  for (const auto& b : k) {
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += b.qs[j * 16 + l];
      EXPECT_EQ(s, b.bsums[j]);
    }
  }
  for (const auto& b : q1) {
    int s = 0;
    for (int l = 0; l < 32; ++l) s += b.qs[l];
    // s is rounded from the unrounded scale: within fp16 precision of d_half * sum.
    const float expect = fp16_to_f32(b.d) * static_cast<float>(s);
    EXPECT_NEAR(fp16_to_f32(b.s), expect, std::fabs(expect) * 2e-3f + 1e-7f);
  }
}

TEST(Sizes, MatchGgmlTraits) {
  EXPECT_EQ(row_size(GgmlType::Q4_K, 4096), 4096u / 256 * 144);
  EXPECT_EQ(row_size(GgmlType::Q6_K, 256), 210u);
  EXPECT_EQ(row_size(GgmlType::Q8_0, 64), 68u);
  EXPECT_EQ(row_size(GgmlType::F16, 10), 20u);
  EXPECT_EQ(row_size(GgmlType::MXFP4, 2880), 2880u / 32 * 17);
  EXPECT_EQ(activation_type(GgmlType::MXFP4), GgmlType::Q8_0);
  for (const auto& c : all_cases()) {
    EXPECT_EQ(row_size(c.type, 256), gguf::row_bytes(c.type, 256)) << c.name;
  }
}

}  // namespace
}  // namespace hypura::quant
