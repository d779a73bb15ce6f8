// AVX2 + FMA + F16C attention kernels (built with the AVX2 flags; see
// src/compute/CMakeLists.txt). The same step as the scalar twin (attention_ref.cc), for
// tiles of up to four query rows at a time:
//   scores: the key block transposed when it is widened (widen_keys), so one vector holds
//           one element of 8 (16) keys; each row's element is broadcast and one FMA chain
//           per score runs over the head in order: no horizontal sums, and every key
//           vector loaded once for the tile's rows;
//   exps:   a vectorised exp (Cephes-style polynomial, ~1 ulp), masked keys set to 0;
//   values: the tile's accumulator rows in registers, FMAs over the keys in ascending
//           order, each value vector loaded once for the tile's rows (a key outside a
//           row's range weighs an exact 0).
// The lane sums of exp follow absolute key positions (blocks start at multiples of 8),
// so masked keys add exact zeros and a row's result does not depend on its batch.
// Value widths that are not multiples of 8 take the scalar twin. The step's code is in
// attention_impl.h, compiled here and, with 16-float vectors, in kernels_avx512_attention.cc.
// Also here: the int8 dot-product peak probe bench reports as its same-run yardstick.
#include <immintrin.h>

#include "compute/cpu/attention_impl.h"
#include "compute/cpu/kernels.h"
#include "compute/cpu/tile_common.h"

namespace hypura::compute {
namespace {

// Eight independent maddubs -> madd -> add chains on registers (the quantized kernels'
// inner step, no memory traffic), timed in rounds until `seconds` have passed.
double int8_peak_avx2(double seconds) {
  __m256i acc[8], w[8];
  for (int i = 0; i < 8; ++i) {
    acc[i] = _mm256_setzero_si256();
    w[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
  }
  const __m256i y = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  constexpr int64_t kRound = 1 << 16;
  const double rate = rounds_per_second(seconds, [&] {
    for (int64_t it = 0; it < kRound; ++it) {
      for (int i = 0; i < 8; ++i) {
        acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(w[i], y), ones));
      }
      // Keeps the compiler from hoisting the loop-invariant products.
      __asm__ volatile(""
                       : "+x"(w[0]), "+x"(w[1]), "+x"(w[2]), "+x"(w[3]), "+x"(w[4]), "+x"(w[5]),
                         "+x"(w[6]), "+x"(w[7]));
    }
  });
  __m256i sum = acc[0];
  for (int i = 1; i < 8; ++i) sum = _mm256_add_epi32(sum, acc[i]);
  volatile int sink = _mm256_extract_epi32(sum, 0);
  (void)sink;
  return rate * kRound * 8 * 32;  // 32 int8 MACs per maddubs
}

}  // namespace

void fill_avx2_attention(KernelTable* table) {
  table->widen_rows = widen_rows_simd;
  table->widen_keys = widen_keys_simd;
  table->attention_step = attention_step_simd;
  table->silu_mul = silu_mul_simd;
  table->gelu_mul = gelu_mul_simd;
  if (!table->int8_peak) table->int8_peak = int8_peak_avx2;  // amx brings its own
}

}  // namespace hypura::compute
