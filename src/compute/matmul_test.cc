// Kernel tests: every dispatch path this CPU has against a float64 reference built from
// the dequantized weights and the dequantized (8-bit) activations, batch invariance,
// odd shapes and poisoned outputs.
//
// Error bound (named, per output element): |y - ref| <= kC * eps * sum_k |w_k * x_k|,
// eps = 2^-24, kC = n_blocks + 64. The integer block sums are exact; what remains is
// float rounding of the per-block scale products and of the running sum over blocks
// (SIMD paths sum in lanes and FMA, which stays within the same bound). Float weights
// (F32/F16/BF16) are summed elementwise, so for them kC = n + 64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compute/compute.h"
#include "compute/cpu/kernels.h"
#include "quant/fp16.h"
#include "quant/quant.h"

namespace hypura::compute {
namespace {

using gguf::GgmlType;

const std::vector<GgmlType>& all_types() {
  static const std::vector<GgmlType> types = {
      GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
      GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
      GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4};
  return types;
}

std::vector<const char*> supported_paths() {
  std::vector<const char*> paths;
  for (int l = 0; l < kSimdLevels; ++l) {
    if (cpu_supports(static_cast<SimdLevel>(l)))
      paths.push_back(simd_level_name(static_cast<SimdLevel>(l)));
  }
  return paths;
}

// A random quantized matrix (n_rows, n_cols) and random activations (n_tok, n_cols).
struct Problem {
  GgmlType type;
  int64_t n_rows, n_cols, n_tok;
  std::vector<uint8_t> w;  // n_rows * row_size bytes
  std::vector<float> x;    // (n_tok, n_cols)

  WeightView view() const { return WeightView{w.data(), type, n_cols, n_rows}; }
};

// Byte offsets of the fp16 scale fields in a block (random bytes elsewhere are valid).
std::vector<int> half_offsets(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
      return {0};
    case GgmlType::Q2_K:
      return {80, 82};
    case GgmlType::Q3_K:
      return {108};
    case GgmlType::Q6_K:
      return {208};
    default:
      return {};
  }
}

// Odd rows: quantized N(0, 0.05) data; even rows of block types: random bytes with finite
// scales, which reach every bit pattern (negative Q3_K scales, -128 quants, high bits;
// MXFP4: every code, -0 included, under E8M0 scales 2^-18 .. 2^-3).
Problem make_problem(GgmlType type, int64_t n_rows, int64_t n_cols, int64_t n_tok,
                     std::mt19937& rng) {
  Problem p{type, n_rows, n_cols, n_tok, {}, {}};
  const size_t rs = quant::row_size(type, n_cols);
  p.w.resize(rs * n_rows);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(n_cols);
  const auto halves = half_offsets(type);
  const size_t bs = quant::type_size(type);
  for (int64_t r = 0; r < n_rows; ++r) {
    uint8_t* dst = p.w.data() + r * rs;
    if (r % 2 == 0 && type == GgmlType::MXFP4) {
      for (size_t k = 0; k < rs; ++k) dst[k] = static_cast<uint8_t>(rng());
      for (size_t b = 0; b < rs / bs; ++b) dst[b * bs] = static_cast<uint8_t>(110 + rng() % 16);
      continue;
    }
    if (r % 2 == 0 && !halves.empty()) {
      for (size_t k = 0; k < rs; ++k) dst[k] = static_cast<uint8_t>(rng());
      for (size_t b = 0; b < rs / bs; ++b) {
        for (int off : halves) {
          const uint16_t h = quant::f32_to_fp16(std::ldexp(dist(rng), -8));
          std::memcpy(dst + b * bs + off, &h, 2);
        }
      }
      continue;
    }
    for (auto& v : row) v = dist(rng) * 0.05f;
    quant::quantize_row_ref(type, row.data(), dst, n_cols);
  }
  p.x.resize(n_tok * n_cols);
  for (auto& v : p.x) v = dist(rng);
  return p;
}

// Float64 reference of every output element and the bound's scale sum |w_k x_k|,
// (n_tok, n_rows) each, computed once per problem.
struct Reference {
  std::vector<double> value, abs_sum;
};

// x row t as the kernels see it: rounded to the activation format, then widened.
std::vector<float> activation_row(const Problem& p, int64_t t, std::vector<uint8_t>* xq) {
  const int64_t n = p.n_cols;
  const GgmlType act = quant::activation_type(p.type);
  xq->resize(quant::row_size(act, n));
  quant::quantize_activations(act, p.x.data() + t * n, xq->data(), n);
  std::vector<float> x(n);
  if (act == GgmlType::Q8_1) {  // d * q; the weight's m meets the stored s separately
    const auto* b = reinterpret_cast<const quant::BlockQ8_1*>(xq->data());
    for (int64_t k = 0; k < n; ++k) x[k] = quant::fp16_to_f32(b[k / 32].d) * b[k / 32].qs[k % 32];
  } else {
    quant::dequantize_row(act, xq->data(), x.data(), n);
  }
  return x;
}

Reference reference(const Problem& p) {
  const int64_t n = p.n_cols;
  const size_t rs = quant::row_size(p.type, n);
  std::vector<float> w(p.n_rows * n);
  for (int64_t r = 0; r < p.n_rows; ++r)
    quant::dequantize_row(p.type, p.w.data() + r * rs, &w[r * n], n);
  Reference ref{std::vector<double>(p.n_tok * p.n_rows), std::vector<double>(p.n_tok * p.n_rows)};
  std::vector<uint8_t> xq;
  for (int64_t t = 0; t < p.n_tok; ++t) {
    const std::vector<float> x = activation_row(p, t, &xq);
    for (int64_t r = 0; r < p.n_rows; ++r) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < n; ++k) {
        s += static_cast<double>(w[r * n + k]) * x[k];
        a += std::fabs(static_cast<double>(w[r * n + k]) * x[k]);
      }
      if (quant::activation_type(p.type) == GgmlType::Q8_1) {
        // The kernels use m * s with s = fp16(d * sum q): account for that rounding.
        const auto* b = reinterpret_cast<const quant::BlockQ8_1*>(xq.data());
        const size_t bs = quant::type_size(p.type);
        for (int64_t blk = 0; blk < n / 32; ++blk) {
          uint16_t mh;
          std::memcpy(&mh, p.w.data() + r * rs + blk * bs + 2, 2);
          const double m = quant::fp16_to_f32(mh);
          double sum_q = 0;
          for (int l = 0; l < 32; ++l) sum_q += b[blk].qs[l];
          s += m * (quant::fp16_to_f32(b[blk].s) - quant::fp16_to_f32(b[blk].d) * sum_q);
          a += std::fabs(m * quant::fp16_to_f32(b[blk].s));
        }
      }
      ref.value[t * p.n_rows + r] = s;
      ref.abs_sum[t * p.n_rows + r] = a;
    }
  }
  return ref;
}

double bound_c(GgmlType type, int64_t n) {
  const int64_t bs = quant::block_size(type);
  return static_cast<double>(bs == 1 ? n : n / bs) + 64.0;
}

std::vector<float> run_matmul(const Problem& p, int n_threads, const char* simd, int64_t chunk) {
  Context ctx(n_threads, simd);
  ctx.reserve(p.n_tok, p.n_cols);
  std::vector<float> y(p.n_tok * p.n_rows, std::numeric_limits<float>::quiet_NaN());
  for (int64_t t0 = 0; t0 < p.n_tok; t0 += chunk) {
    const int64_t nt = std::min(chunk, p.n_tok - t0);
    ctx.matmul(p.view(), p.x.data() + t0 * p.n_cols, nt, y.data() + t0 * p.n_rows);
  }
  return y;
}

void expect_close_to_reference(const Problem& p, const Reference& ref, const std::vector<float>& y,
                               const std::string& what) {
  const double eps = std::ldexp(1.0, -24);
  const double c = bound_c(p.type, p.n_cols);
  int failures = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double bound = c * eps * ref.abs_sum[i] + 1e-30;
    if (!(std::fabs(y[i] - ref.value[i]) <= bound) && failures++ < 5) {
      ADD_FAILURE() << what << " " << gguf::type_name(p.type) << " row " << i % p.n_rows << " tok "
                    << i / p.n_rows << ": got " << y[i] << " ref " << ref.value[i] << " bound "
                    << bound;
    }
  }
}

// Every path x every type: products within the bound of the float64 reference.
TEST(Matmul, EveryPathMatchesReference) {
  std::mt19937 rng(1);  // fixed: failures reproduce
  for (GgmlType type : all_types()) {
    const int64_t bs = std::max<int64_t>(quant::block_size(type), 32);
    // An odd block count; and the 32-element formats at 8 blocks, whose rows the AVX-512
    // one-token kernel takes in pairs (37 rows: a lone one at the end).
    for (int64_t n_blocks : {int64_t{9}, int64_t{8}}) {
      if (n_blocks == 8 && bs != 32) continue;
      const Problem p = make_problem(type, 37, bs * n_blocks, 3, rng);
      const Reference ref = reference(p);
      for (const char* path : supported_paths()) {
        expect_close_to_reference(p, ref, run_matmul(p, 2, path, p.n_tok), path);
      }
    }
  }
}

// What real models contain (gemma-3, SmolLM2, Qwen2.5 rows are 576, 640, 896, 960, 4864...
// wide; gpt-oss's 2880): row lengths that are not multiples of 256 or of any SIMD unroll, odd block
// counts, and activations as large as gemma-3's (its residual stream reaches 1e5; normed inputs of
// the projections carry outliers of 1e3). Every path against the float64 reference and against its
// scalar twin, within twice the named bound (both are within it of the reference).
//
// Q4_1 / Q5_1 take Q8_1 activations, whose per-block sum s = d * sum(q) is an fp16 (as in
// llama.cpp): it overflows when a block's |x| sums past 65504, so their activations stay
// below that here; the other formats get the full range.
TEST(Matmul, RealModelRowLengthsAndLargeActivations) {
  std::mt19937 rng(2);  // fixed: failures reproduce
  const int64_t legacy_lengths[] = {576, 608, 640, 896, 960, 1056, 2880, 4864};
  const int64_t k_lengths[] = {768, 1280, 2304, 4864};
  for (GgmlType type : all_types()) {
    const int64_t bs = quant::block_size(type);
    const bool k_quant = bs == 256;
    const bool q8_1 = quant::activation_type(type) == GgmlType::Q8_1;
    for (int64_t n :
         k_quant ? std::vector<int64_t>(std::begin(k_lengths), std::end(k_lengths))
                 : std::vector<int64_t>(std::begin(legacy_lengths), std::end(legacy_lengths))) {
      for (float scale : {1.0f, 30.0f, 1000.0f}) {
        if (q8_1 && scale > 30.0f) continue;
        Problem p = make_problem(type, 19, n, 5, rng);
        for (size_t i = 0; i < p.x.size(); ++i) p.x[i] *= scale;
        p.x[7] = 60.0f * scale;  // an outlier channel, as gemma's
        p.x[n + 3] = -45.0f * scale;
        const Reference ref = reference(p);
        const std::vector<float> scalar = run_matmul(p, 1, "scalar", p.n_tok);
        expect_close_to_reference(p, ref, scalar, "scalar");
        const double c = 2 * bound_c(type, n) * std::ldexp(1.0, -24);
        for (const char* path : supported_paths()) {
          const std::vector<float> y = run_matmul(p, 2, path, p.n_tok);
          expect_close_to_reference(p, ref, y, path);
          int failures = 0;
          for (size_t i = 0; i < y.size(); ++i) {
            if (!(std::fabs(y[i] - scalar[i]) <= c * ref.abs_sum[i] + 1e-30) && failures++ < 3) {
              ADD_FAILURE() << path << " vs scalar " << gguf::type_name(type) << " n " << n
                            << " scale " << scale << " element " << i << ": " << y[i] << " vs "
                            << scalar[i];
            }
          }
        }
      }
    }
  }
}

// MXFP4 at gpt-oss's shapes (2880 columns: 90 blocks, not a multiple of 256) and small
// ones, every path against dequantized weights times the float activations themselves:
// the only error beyond float rounding is the Q8_0 rounding of x, at most half a step plus
// the fp16 rounding of the step (127 * d * 2^-11) per element, so per output element
//   |y - ref| <= sum_k |w_k| * d_k * (0.5 + 127 / 2048) + kC * eps * sum_k |w_k x_k|.
// Over all outputs the relative RMS error (against the RMS of ref) stays below 1%.
TEST(Matmul, Mxfp4AgainstFloatActivations) {
  std::mt19937 rng(7);  // fixed: failures reproduce
  for (int64_t n : {int64_t{32}, int64_t{96}, int64_t{512}, int64_t{2880}}) {
    const Problem p = make_problem(GgmlType::MXFP4, 45, n, 4, rng);
    std::vector<float> w(p.n_rows * n);
    for (int64_t r = 0; r < p.n_rows; ++r)
      quant::dequantize_row(p.type, p.w.data() + r * quant::row_size(p.type, n), &w[r * n], n);
    std::vector<quant::BlockQ8_0> xq(n / 32);
    for (const char* path : supported_paths()) {
      const std::vector<float> y = run_matmul(p, 2, path, p.n_tok);
      double err2 = 0, ref2 = 0;
      for (int64_t t = 0; t < p.n_tok; ++t) {
        const float* x = p.x.data() + t * n;
        quant::quantize_row_q8_0(x, xq.data(), n);
        for (int64_t r = 0; r < p.n_rows; ++r) {
          double ref = 0, abs_sum = 0, act_bound = 0;
          for (int64_t k = 0; k < n; ++k) {
            const double wk = w[r * n + k];
            ref += wk * x[k];
            abs_sum += std::fabs(wk * x[k]);
            act_bound += std::fabs(wk) * quant::fp16_to_f32(xq[k / 32].d) * (0.5 + 127.0 / 2048);
          }
          const double bound =
              act_bound + 2 * bound_c(p.type, n) * std::ldexp(1.0, -24) * abs_sum + 1e-30;
          const double got = y[t * p.n_rows + r];
          EXPECT_LE(std::fabs(got - ref), bound) << path << " n " << n << " row " << r;
          err2 += (got - ref) * (got - ref);
          ref2 += ref * ref;
        }
      }
      EXPECT_LT(std::sqrt(err2 / ref2), 0.01) << path << " n " << n;
    }
  }
}

// MXFP4 rows whose blocks all share one E8M0 exponent, from the subnormal scales (e = 0,
// 1: 2^-128, 2^-127) to large ones, so every path's scale conversion shows in the result:
// the named bound without the absolute floor that would hide rows this small.
TEST(Matmul, Mxfp4ExtremeScales) {
  std::mt19937 rng(8);  // fixed: failures reproduce
  const uint8_t exponents[] = {0, 1, 2, 3, 100, 127, 150, 190};
  const int64_t n = 2880;
  Problem p = make_problem(GgmlType::MXFP4, std::size(exponents), n, 3, rng);
  for (float& v : p.x) v *= 1000.0f;  // scales of x near 2^4: every product a normal float
  const size_t rs = quant::row_size(p.type, n);
  for (size_t r = 0; r < std::size(exponents); ++r) {
    for (int64_t b = 0; b < n / 32; ++b) {
      uint8_t* block = p.w.data() + r * rs + b * sizeof(quant::BlockMXFP4);
      for (int k = 1; k < 17; ++k) block[k] = static_cast<uint8_t>(rng());
      block[0] = exponents[r];
    }
  }
  const Reference ref = reference(p);
  const double c = bound_c(p.type, n) * std::ldexp(1.0, -24);
  for (const char* path : supported_paths()) {
    const std::vector<float> y = run_matmul(p, 2, path, p.n_tok);
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_LE(std::fabs(y[i] - ref.value[i]), c * ref.abs_sum[i])
          << path << " e " << int{exponents[i % std::size(exponents)]} << ": " << y[i] << " vs "
          << ref.value[i];
    }
  }
}

// Shapes that stress tails: one row, rows not a multiple of the thread count or tile,
// the smallest row length, many tokens; outputs start as NaN to catch unwritten cells.
TEST(Matmul, OddShapesAndPoisonedOutputs) {
  std::mt19937 rng(3);  // fixed: failures reproduce
  const int64_t shapes[][3] = {{1, 1, 1}, {3, 1, 2}, {17, 2, 5}, {130, 1, 67}, {33, 3, 1}};
  for (GgmlType type : {GgmlType::F32, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K,
                        GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q2_K, GgmlType::MXFP4}) {
    const int64_t bs = std::max<int64_t>(quant::block_size(type), 32);
    for (const auto& s : shapes) {
      const Problem p = make_problem(type, s[0], bs * s[1], s[2], rng);
      const Reference ref = reference(p);
      for (const char* path : supported_paths()) {
        for (int threads : {1, 2, 3}) {
          expect_close_to_reference(p, ref, run_matmul(p, threads, path, p.n_tok),
                                    std::string(path) + " t" + std::to_string(threads));
        }
      }
    }
  }
}

// Batch invariance: the same rows from one batch, from chunks, token by token, and with
// 1 or 2 threads are bit-identical on every path.
TEST(Matmul, BatchInvariance) {
  std::mt19937 rng(4);  // fixed: failures reproduce
  for (GgmlType type : all_types()) {
    const int64_t bs = std::max<int64_t>(quant::block_size(type), 32);
    // The 32-element formats also at 37 blocks: two full groups of 16 and a partial one
    // (the VNNI levels switch kernels by token count; both must agree bit for bit), and at
    // 260, past the rows their prompt kernel unpacks once (it unpacks per token chunk), and at
    // 8, whose rows the AVX-512 one-token kernel takes in pairs.
    for (int64_t n_blocks : {int64_t{4}, int64_t{8}, int64_t{37}, int64_t{260}}) {
      if (n_blocks != 4 && bs != 32) continue;
      const Problem p = make_problem(type, 70, bs * n_blocks, 19, rng);
      for (const char* path : supported_paths()) {
        const auto whole = run_matmul(p, 2, path, p.n_tok);
        for (auto [threads, chunk] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{2, 3},
                                      std::pair{2, 7}, std::pair{1, 19}}) {
          const auto other = run_matmul(p, threads, path, chunk);
          EXPECT_EQ(std::memcmp(whole.data(), other.data(), whole.size() * sizeof(float)), 0)
              << path << " " << gguf::type_name(type) << " blocks " << n_blocks << " threads "
              << threads << " chunk " << chunk;
        }
      }
    }
  }
}

// Products that share their input in one job (matmul_shared: Q/K/V, gate/up) give each
// product's matmul() bit for bit, on every path, for mixed formats (several activation
// formats and quantizers at once), one to kSharedMaxTokens tokens and past it, without
// growing the scratch reserve() sized.
TEST(Matmul, SharedInputMatchesOneProductEach) {
  std::mt19937 rng(6);
  const std::vector<std::vector<GgmlType>> groups = {
      {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K},
      {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0},
      {GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1},
      {GgmlType::F32, GgmlType::BF16},
      {GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::Q8_0}};
  for (const char* path : supported_paths()) {
    for (const auto& types : groups) {
      for (int64_t n_tok : {int64_t{1}, int64_t{5}, Context::kSharedMaxTokens, int64_t{19}}) {
        std::vector<Problem> ps;
        for (size_t i = 0; i < types.size(); ++i)
          ps.push_back(make_problem(types[i], 40 + 24 * static_cast<int64_t>(i), 512, n_tok, rng));
        Context ctx(3, path);
        ctx.reserve(19, 512);
        const size_t reserved = ctx.scratch_bytes();
        std::vector<WeightView> views;
        std::vector<std::vector<float>> shared, one;
        for (const Problem& p : ps) {
          views.push_back(p.view());
          shared.emplace_back(n_tok * p.n_rows, std::numeric_limits<float>::quiet_NaN());
          one.emplace_back(n_tok * p.n_rows, std::numeric_limits<float>::quiet_NaN());
          ctx.matmul(p.view(), ps.front().x.data(), n_tok, one.back().data());
        }
        std::vector<const WeightView*> w;
        std::vector<float*> y;
        for (size_t i = 0; i < ps.size(); ++i) {
          w.push_back(&views[i]);
          y.push_back(shared[i].data());
        }
        ctx.matmul_shared(w.data(), y.data(), static_cast<int>(ps.size()), ps.front().x.data(),
                          n_tok);
        for (size_t i = 0; i < ps.size(); ++i) {
          EXPECT_EQ(std::memcmp(one[i].data(), shared[i].data(), one[i].size() * sizeof(float)), 0)
              << path << " " << gguf::type_name(types[i]) << " in a group of " << ps.size() << ", "
              << n_tok << " tokens";
        }
        EXPECT_EQ(ctx.scratch_bytes(), reserved) << path << ", " << n_tok << " tokens";
      }
    }
  }
}

// Per-group products of one stacked tensor in one job (matmul_grouped: MLA's per-head
// products) give each group's matmul() bit for bit, on every path, for one token, a few,
// and more than a tile's worth.
TEST(Matmul, GroupedMatchesOneProductPerGroup) {
  std::mt19937 rng(8);
  for (const char* path : supported_paths()) {
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K,
                          GgmlType::Q6_K, GgmlType::MXFP4}) {
      for (int64_t n_tok : {int64_t{1}, int64_t{3}, int64_t{70}}) {
        const int64_t n_groups = 5, n_out = 24, n_cols = 256;
        const Problem p = make_problem(type, n_groups * n_out, n_cols, n_groups * n_tok, rng);
        Context ctx(3, path);
        std::vector<float> grouped(n_groups * n_tok * n_out, std::nanf(""));
        ctx.matmul_grouped(p.view(), n_groups, p.x.data(), n_tok, grouped.data());
        for (int64_t g = 0; g < n_groups; ++g) {
          std::vector<float> one(n_tok * n_out, std::nanf(""));
          ctx.matmul(p.view().rows(g * n_out, n_out), p.x.data() + g * n_tok * n_cols, n_tok,
                     one.data());
          EXPECT_EQ(std::memcmp(one.data(), grouped.data() + g * n_tok * n_out,
                                one.size() * sizeof(float)),
                    0)
              << path << " " << gguf::type_name(type) << " group " << g << ", " << n_tok
              << " tokens";
        }
      }
    }
  }
}

// Products with inputs of their own in one job (matmul_many: a decode step's expert downs,
// the shared expert's among them with another row length) give each product's matmul()
// bit for bit; an input that two products read is quantized once for both.
TEST(Matmul, ManyInputsMatchOneProductEach) {
  std::mt19937 rng(9);
  const std::vector<std::pair<GgmlType, int64_t>> shapes = {
      {GgmlType::Q4_K, 256},  {GgmlType::Q6_K, 256}, {GgmlType::Q4_K, 512},
      {GgmlType::MXFP4, 256}, {GgmlType::Q8_0, 256}, {GgmlType::F32, 256}};
  for (const char* path : supported_paths()) {
    for (int64_t n_tok : {int64_t{1}, int64_t{3}, int64_t{19}}) {
      std::vector<Problem> ps;
      for (size_t i = 0; i < shapes.size(); ++i)
        ps.push_back(make_problem(shapes[i].first, 40 + 8 * static_cast<int64_t>(i),
                                  shapes[i].second, n_tok, rng));
      Context ctx(3, path);
      ctx.reserve(19, 512);
      std::vector<WeightView> views;
      std::vector<const WeightView*> w;
      std::vector<const float*> x;
      std::vector<std::vector<float>> many, one;
      for (size_t i = 0; i < ps.size(); ++i) views.push_back(ps[i].view());
      for (size_t i = 0; i < ps.size(); ++i) {
        // Products 0 and 1 read the same input (one quantized copy of two formats' rows).
        const float* xi = (i == 1 ? ps[0] : ps[i]).x.data();
        w.push_back(&views[i]);
        x.push_back(xi);
        many.emplace_back(n_tok * ps[i].n_rows, std::nanf(""));
        one.emplace_back(n_tok * ps[i].n_rows, std::nanf(""));
        ctx.matmul(views[i], xi, n_tok, one.back().data());
      }
      std::vector<float*> y;
      for (auto& m : many) y.push_back(m.data());
      ctx.matmul_many(w.data(), x.data(), y.data(), static_cast<int>(ps.size()), n_tok);
      for (size_t i = 0; i < ps.size(); ++i) {
        EXPECT_EQ(std::memcmp(one[i].data(), many[i].data(), one[i].size() * sizeof(float)), 0)
            << path << " " << gguf::type_name(shapes[i].first) << " product " << i << ", " << n_tok
            << " tokens";
      }
    }
  }
}

// matmul_grouped with its rows in place (GroupedLayout: heads interleaved in each token's
// row, as MLA keeps them) gives the contiguous-block call's products bit for bit.
TEST(Matmul, GroupedInPlaceMatchesBlocks) {
  std::mt19937 rng(10);
  for (const char* path : supported_paths()) {
    for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K}) {
      for (int64_t n_tok : {int64_t{1}, int64_t{4}}) {
        const int64_t n_groups = 3, n_out = 32, n_cols = 256, in_stride = 288, out_stride = 40;
        const Problem p = make_problem(type, n_groups * n_out, n_cols, n_groups * n_tok, rng);
        // The same rows interleaved: group g of token t at (t * n_groups + g) * stride.
        std::vector<float> in(n_tok * n_groups * in_stride, std::nanf(""));
        for (int64_t g = 0; g < n_groups; ++g) {
          for (int64_t t = 0; t < n_tok; ++t)
            std::copy_n(p.x.data() + (g * n_tok + t) * n_cols, n_cols,
                        in.data() + (t * n_groups + g) * in_stride);
        }
        Context ctx(3, path);
        std::vector<float> blocks(n_groups * n_tok * n_out);
        std::vector<float> placed(n_tok * n_groups * out_stride, -1.0f);
        ctx.matmul_grouped(p.view(), n_groups, p.x.data(), n_tok, blocks.data());
        ctx.matmul_grouped(p.view(), n_groups, in.data(), n_tok, placed.data(),
                           Context::GroupedLayout{in_stride, n_groups * in_stride, out_stride,
                                                  n_groups * out_stride});
        for (int64_t g = 0; g < n_groups; ++g) {
          for (int64_t t = 0; t < n_tok; ++t) {
            const float* want = blocks.data() + (g * n_tok + t) * n_out;
            const float* got = placed.data() + (t * n_groups + g) * out_stride;
            EXPECT_EQ(std::memcmp(want, got, n_out * sizeof(float)), 0)
                << path << " " << gguf::type_name(type) << " group " << g << " token " << t;
            EXPECT_EQ(got[n_out], -1.0f) << "wrote past the group's outputs";
          }
        }
      }
    }
  }
}

// Chained per-group products (matmul_chained: MLA's q rows of each head, then their
// absorption, with Wkv_a beside them) give matmul() of each group's rows, then matmul() of
// the first w2.n_cols of that result, bit for bit; the extra product as its own matmul().
TEST(Matmul, ChainedMatchesTwoProductsPerGroup) {
  std::mt19937 rng(11);
  for (const char* path : supported_paths()) {
    for (auto [t1, t2] :
         {std::pair{GgmlType::Q5_0, GgmlType::Q5_0}, std::pair{GgmlType::Q4_K, GgmlType::Q8_0},
          std::pair{GgmlType::F32, GgmlType::F32}, std::pair{GgmlType::Q6_K, GgmlType::F16}}) {
      for (bool with_extra : {false, true}) {
        const int64_t n_groups = 4, n1 = 48, n2 = 64, n_cols = 256, nope = 32;
        const int64_t y1_stride = n1, y2_stride = 80;  // y2's groups padded, as q()'s heads
        const Problem p1 = make_problem(t1, n_groups * n1, n_cols, 1, rng);
        const Problem p2 = make_problem(t2, n_groups * n2, nope, 1, rng);
        const Problem pe = make_problem(GgmlType::Q4_K, 80, n_cols, 1, rng);
        Context ctx(3, path);
        std::vector<float> y1(n_groups * y1_stride, std::nanf(""));
        std::vector<float> y2(n_groups * y2_stride, -1.0f), ye(80, std::nanf(""));
        const WeightView extra = pe.view();
        ctx.matmul_chained(p1.view(), p2.view(), n_groups, p1.x.data(), y1.data(), y1_stride,
                           y2.data(), y2_stride, with_extra ? &extra : nullptr, ye.data());
        std::vector<float> want1(n_groups * n1), want2(n2), want_e(80);
        ctx.matmul(p1.view(), p1.x.data(), 1, want1.data());
        EXPECT_EQ(std::memcmp(want1.data(), y1.data(), want1.size() * sizeof(float)), 0)
            << path << " " << gguf::type_name(t1);
        for (int64_t g = 0; g < n_groups; ++g) {
          ctx.matmul(p2.view().rows(g * n2, n2), want1.data() + g * n1, 1, want2.data());
          EXPECT_EQ(std::memcmp(want2.data(), y2.data() + g * y2_stride, n2 * sizeof(float)), 0)
              << path << " " << gguf::type_name(t2) << " group " << g;
          EXPECT_EQ(y2[g * y2_stride + n2], -1.0f) << "wrote past group " << g;
        }
        if (with_extra) {
          ctx.matmul(extra, p1.x.data(), 1, want_e.data());
          EXPECT_EQ(std::memcmp(want_e.data(), ye.data(), want_e.size() * sizeof(float)), 0)
              << path << " extra";
        }
      }
    }
  }
}

// The SIMD tables really replace the scalar kernels (else the tests above prove little).
TEST(Dispatch, SimdTablesProvideOwnKernels) {
  const KernelTable& scalar = *kernel_table(SimdLevel::kScalar);
  for (int l = 1; l < kSimdLevels; ++l) {
    const KernelTable* t = kernel_table(static_cast<SimdLevel>(l));
    if (!t) continue;
    for (GgmlType type : all_types()) {
      EXPECT_NE(tile_fn(*t, type), tile_fn(scalar, type))
          << t->name << " " << gguf::type_name(type);
    }
  }
  Context ctx(1, "scalar");
  EXPECT_STREQ(ctx.simd_name(), "scalar");
}

// A table's own activation quantizer gives exactly the reference bytes: same scales, same
// rounding. AVX-512 and AMX Q4_K / Q5_K store the 32-value sub-blocks of each Q8_K block in nibble
// order 0, 2, 1, 3, 4, 6, 5, 7 (kernels_avx512_impl.h); the comparison undoes that.
// The AVX2 legacy kernels' grouped activation rows (kernels_avx2.cc, GroupQ8_0/GroupQ8_1)
// back in the standard block layout: groups of four blocks store 128 quants, then the
// four scales (then the four sums for Q8_1); the last n_blocks % 4 blocks are standard.
std::vector<uint8_t> ungroup(const std::vector<uint8_t>& got, GgmlType act, int64_t n) {
  const bool sums = act == GgmlType::Q8_1;
  const size_t block = sums ? 36 : 34, head = sums ? 4 : 2;
  const int64_t nb = n / 32, ng = nb / 4;
  std::vector<uint8_t> out(got);
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* in = got.data() + g * 4 * block;
    for (int k = 0; k < 4; ++k) {
      uint8_t* b = out.data() + (g * 4 + k) * block;
      std::memcpy(b, in + 128 + 2 * k, 2);                // d
      if (sums) std::memcpy(b + 2, in + 136 + 2 * k, 2);  // s
      std::memcpy(b + head, in + 32 * k, 32);             // qs
    }
  }
  return out;
}

// The AVX-512 legacy kernels' transposed groups (kernels_avx512_impl.h, Legacy32) back in
// the standard block layout: each run of up to 16 blocks stores its m scales (then m sums
// for Q8_1), then 8 rows of m dwords, row k holding quants 4k..4k+3 of every block.
std::vector<uint8_t> untranspose(const std::vector<uint8_t>& got, GgmlType act, int64_t n) {
  const bool sums = act == GgmlType::Q8_1;
  const size_t block = sums ? 36 : 34, head = sums ? 4 : 2;
  const int64_t nb = n / 32;
  std::vector<uint8_t> out(got.size());
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    const int64_t m = std::min<int64_t>(16, nb - b0);
    const uint8_t* in = got.data() + b0 * block;
    for (int64_t l = 0; l < m; ++l) {
      uint8_t* b = out.data() + (b0 + l) * block;
      std::memcpy(b, in + 2 * l, 2);                      // d
      if (sums) std::memcpy(b + 2, in + 2 * (m + l), 2);  // s
      for (int k = 0; k < 8; ++k) std::memcpy(b + head + 4 * k, in + head * m + 4 * (k * m + l), 4);
    }
  }
  return out;
}

TEST(Activations, TableQuantizersMatchReference) {
  std::mt19937 rng(20261201);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  // 1536 for every format; 1600 (50 blocks of 32: AVX2's groups of four keep a tail of
  // two, AVX-512's groups of 16 end in one of two) for the 32-element ones.
  const int64_t n_max = 256 * 6 + 64;
  std::vector<float> x(n_max);
  for (auto& v : x) v = dist(rng);
  for (int i = 0; i < 256; ++i) x[i] = 0.0f;                  // all-zero block
  for (int i = 256; i < 512; ++i) x[i] = 1e-30f * dist(rng);  // tiny values
  for (int i = 768; i < 1280; ++i) x[i] = 0.1f * dist(rng);   // |x| < 5 almost surely
  x[780] = 5.0f;  // block 3: equal magnitudes, the first (+5) sets the sign of the scale
  x[790] = -5.0f;
  x[1030] = -5.0f;  // block 4: the first is -5
  x[1100] = 5.0f;
  for (int i = 1280; i < 1312; ++i) x[i] = (i % 2 ? 0.5f : -0.5f);  // exact .5 products
  const int kNibble[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int l = 1; l < kSimdLevels; ++l) {
    const KernelTable* t = kernel_table(static_cast<SimdLevel>(l));
    if (!t) continue;
    for (GgmlType type : all_types())
      for (int64_t n : {n_max - 64, n_max}) {
        const QuantizeActFn fn = quantize_act_fn(*t, type);
        if (!fn) continue;
        const GgmlType act = quant::activation_type(type);
        if (n % quant::block_size(act) != 0) continue;
        std::vector<uint8_t> ref(quant::row_size(act, n)), got(ref.size(), 0xCD);
        quant::quantize_activations(act, x.data(), ref.data(), n);
        fn(x.data(), got.data(), n);
        if (act == GgmlType::Q8_0 || act == GgmlType::Q8_1) {
          got = l == static_cast<int>(SimdLevel::kAvx2) ? ungroup(got, act, n)
                                                        : untranspose(got, act, n);
        }
        const bool nibble =
            t->level >= SimdLevel::kAvx512 && (type == GgmlType::Q4_K || type == GgmlType::Q5_K);
        if (!nibble) {
          EXPECT_EQ(std::memcmp(ref.data(), got.data(), ref.size()), 0)
              << t->name << " " << gguf::type_name(type);
          continue;
        }
        const auto* r = reinterpret_cast<const quant::BlockQ8_K*>(ref.data());
        const auto* g = reinterpret_cast<const quant::BlockQ8_K*>(got.data());
        for (int64_t b = 0; b < n / 256; ++b) {
          EXPECT_EQ(quant::float_bits(r[b].d), quant::float_bits(g[b].d)) << "block " << b;
          for (int s = 0; s < 8; ++s) {
            EXPECT_EQ(std::memcmp(g[b].qs + 32 * s, r[b].qs + 32 * kNibble[s], 32), 0)
                << b << " " << s;
            EXPECT_EQ(g[b].bsums[2 * s], r[b].bsums[2 * kNibble[s]]);
            EXPECT_EQ(g[b].bsums[2 * s + 1], r[b].bsums[2 * kNibble[s] + 1]);
          }
        }
      }
  }
}

// reserve() is enough for every weight type: matmul never grows the scratch afterwards.
TEST(Context, ReserveCoversEveryActivationFormat) {
  std::mt19937 rng(5);
  for (const char* path : supported_paths()) {
    Context ctx(2, path);
    ctx.reserve(9, 768);
    const size_t reserved = ctx.scratch_bytes();
    for (GgmlType type : all_types()) {
      const Problem p = make_problem(type, 8, 768, 9, rng);
      std::vector<float> y(9 * 8);
      ctx.matmul(p.view(), p.x.data(), 9, y.data());
      EXPECT_EQ(ctx.scratch_bytes(), reserved) << path << " " << gguf::type_name(type);
    }
  }
}

TEST(GetRows, DequantizesSelectedRows) {
  std::mt19937 rng(1);
  const Problem p = make_problem(GgmlType::Q6_K, 10, 512, 1, rng);
  Context ctx(2);
  const int32_t ids[3] = {7, 0, 7};
  std::vector<float> out(3 * 512), row(512);
  ctx.get_rows(p.view(), ids, 3, out.data());
  for (int i = 0; i < 3; ++i) {
    quant::dequantize_row(p.type, p.w.data() + ids[i] * quant::row_size(p.type, 512), row.data(),
                          512);
    EXPECT_EQ(std::memcmp(row.data(), out.data() + i * 512, 512 * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace hypura::compute
