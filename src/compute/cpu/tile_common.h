// Shared scaffolding of the SIMD kernel files (included only by per-ISA .cc files).
//
// A row kernel K provides
//   template <int T> static void dot(n, w_row, x, x_stride, out, prefetch)
// computing out[t] = dot(w_row, x row t) for t < T (T <= tile_of's kMaxTok) with the weights
// unpacked once and reused for the T activation rows. Each token's arithmetic is independent of T,
// which is what keeps results batch-invariant. `prefetch` asks for the weight lines ahead of the
// row; only the first pass over a row (first token group) does that.
//
// Everything here must stay in an anonymous namespace: the same template compiled with
// different -m flags in two files must not be merged by the linker.
#pragma once

#include <immintrin.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace {

// Software prefetch distance for weight streams, in bytes ahead of the block in use.
// Weights are read once per token: the hardware prefetcher alone leaves a core waiting
// on DRAM between bursts of compute; asking for lines this far ahead overlaps the two
// (docs/BENCHMARKS.md, "CPU kernels").
constexpr int kPrefetchDistance = 3072;

// Prefetches about bytes / 64 lines from p + distance on: called once per block of a
// contiguous stream, it asks for each line of the stream about once (rounding to the
// nearest line count keeps the extra instructions low for 34- or 144-byte blocks).
inline void prefetch_ahead(const void* p, int bytes) {
  const char* q = static_cast<const char*>(p) + kPrefetchDistance;
  const int lines = bytes < 96 ? 1 : (bytes + 32) / 64;
  for (int l = 0; l < lines; ++l) _mm_prefetch(q + 64 * l, _MM_HINT_T0);
}

// Runs body() in rounds until `seconds` have passed; returns rounds per second (the int8
// peak probes of the kernel tables).
template <class Body>
double rounds_per_second(double seconds, Body body) {
  int64_t rounds = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    body();
    ++rounds;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < seconds);
  return static_cast<double>(rounds) / elapsed;
}

// Token groups outside, rows inside: a group's activation rows (up to kMaxTok x ~4.6 KiB
// for 4096 columns) stay in L1 while the tile's weight rows stream from L2, and each
// weight row is unpacked once per group.
template <class K, int kMaxTok = 4>
void tile_of(int64_t n, const void* w, size_t w_stride, int n_rows, const void* x, size_t x_stride,
             int n_tok, float* y, size_t y_stride) {
  static_assert(kMaxTok >= 1 && kMaxTok <= 8);
  using DotFn = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, bool);
  // dots[T - 1] = K::dot<T>: one instantiation per group size, chosen per group.
  static constexpr auto dots = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<DotFn, kMaxTok>{&K::template dot<I + 1>...};
  }
  (std::make_integer_sequence<int, kMaxTok>{});
  const auto* xb = static_cast<const uint8_t*>(x);
  float out[kMaxTok];
  for (int t0 = 0; t0 < n_tok; t0 += kMaxTok) {
    const int nt = n_tok - t0 < kMaxTok ? n_tok - t0 : kMaxTok;
    const uint8_t* xt = xb + t0 * x_stride;
    for (int r = 0; r < n_rows; ++r) {
      const auto* wr = static_cast<const uint8_t*>(w) + r * w_stride;
      dots[nt - 1](n, wr, xt, x_stride, out, t0 == 0);
      for (int t = 0; t < nt; ++t) y[(t0 + t) * y_stride + r] = out[t];
    }
  }
}

}  // namespace
