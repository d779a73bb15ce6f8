// AMX kernels (Intel Advanced Matrix Extensions, INT8 tiles; Sapphire Rapids and later):
// the avx512vnni table with the K-quant products of Q4_K_M files (Q4_K, Q5_K, Q6_K) and the
// prompt products of the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4; at the end)
// moved onto the tile unit. Built with -mamx-tile -mamx-int8 on top of the AVX-512 VNNI flags;
// dispatch.cc selects it only where CPUID reports AMX and the kernel grants this process
// the tile state (arch_prctl).
//
// One TDPBUSD multiplies a 16 x 64 byte tile of weights by a 16 x 64 byte tile of
// activations laid out four bytes per token ("VNNI layout"), accumulating a 16 x 16 int32
// tile: 16384 multiply-accumulates in one instruction, against 64 for vpdpbusd. The tile
// unit has no per-sub-block scales, so they are folded into the weights in small digits
// whose products with the quants stay within a byte, one weight tile per digit (K4, K6
// below); the C tiles' weighted sum is then each super-block's exact integer dot T (and,
// for Q4_K / Q5_K, the minimums' dot M from the Q8_K per-16 sums).
//
// Arithmetic of one output (row r, token t), the same whatever the tile shape, the tile's
// position, the number of tokens and the thread (batch invariance, kernels.h):
//   acc = 0; for each super-block i in order:
//     acc = fma(float(T_i), d_i * dy_i, acc); acc = fnmadd(float(M_i), dmin_i * dy_i, acc)
// (Q6_K: no M step). T_i and M_i are exact integers. Up to kMaxVectorTokens tokens run on
// the vector unit (vpdpwssd, T reduced over 16 lanes per row) with the float steps
// vectorised over rows; more run on the tile unit with them vectorised over tokens: the
// same operations on each element either way. This differs from the avx512vnni table's
// order (there each super-block's integer dot is split over 16 lanes), so the two levels
// agree within the kernel tolerances, not bit for bit.
//
// Every function lives in an anonymous namespace (see tile_common.h).
#include <cstdlib>

#include "compute/cpu/kernels_avx512_impl.h"

namespace hypura::compute {
namespace {

constexpr int kRowsPerTile = 16;  // weight rows of an A tile (and of a C tile)
constexpr int kToksPerTile = 16;  // tokens of a B tile (columns of a C tile)
constexpr int kMaxRowTiles = 4;   // Context's kRowBlock (64) / 16
constexpr int kMaxTokTiles = 4;   // Context's kTokBlock (64) / 16
constexpr int kChunks = 4;        // 64-element chunks of a super-block (one product each)
constexpr int kTileBytes = 1024;  // 16 rows x 64 bytes
// Up to this many tokens the products run on the vector unit (vpdpwssd), above it on the
// tile unit: preparing weight tiles costs more than the tile unit saves for few tokens.
constexpr int kMaxVectorTokens = 8;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows x 64 bytes: C 16 x 16 int32, A 16 rows x 64 quants, B 16 x (16
// tokens x 4 quants).
const TileConfig& tile_config() {
  static const TileConfig config = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.rows[t] = 16;
      c.colsb[t] = 64;
    }
    return c;
  }();
  return config;
}

// The per-row figures of one super-block for the float steps: d, dmin and the minimums in
// pairs (m_{2p} | m_{2p+1} << 16, for vpmaddwd with the activation sums).
struct RowMeta {
  alignas(64) float d[kRowsPerTile];
  alignas(64) float dmin[kRowsPerTile];
  alignas(64) int32_t min_pair[4][kRowsPerTile];
};

// A row tile's weights of one super-block for the tile unit (a[i][c]: weight tile i of
// 64-element chunk c, the format's own split of quants and scales), rows padded with zeros.
constexpr int kMaxATiles = 5;
struct RowTile {
  alignas(64) int8_t a[kMaxATiles][kChunks][kTileBytes];
  RowMeta meta;
};

// A token tile's activations of one super-block: VNNI layout (b[c] row k holds quants
// 64c + 4k .. 64c + 4k + 3 of each token), the scales and the 32-element sums in pairs.
struct TokTile {
  alignas(64) int8_t b[kChunks][kTileBytes];
  alignas(64) float d[kToksPerTile];
  alignas(64) int32_t sum_pair[4][kToksPerTile];
};

// Integer C tiles of one job, stored for the float steps.
constexpr int kMaxCTiles = 5;
struct CTiles {
  alignas(64) int32_t c[kMaxCTiles][kRowsPerTile * kToksPerTile];
};

struct Scratch {
  RowTile rows[2];  // double-buffered: the next step's are written while the tile unit
  CTiles c[2];      // reads the current ones
  alignas(64) float acc[kMaxRowTiles][kMaxTokTiles][kRowsPerTile * kToksPerTile];  // [r][t]
  alignas(64) int32_t isum[kMaxVectorTokens][kRowsPerTile][16];  // vector path, per row
  RowMeta meta;                                                  // vector path
  alignas(64) float acc_rows[kMaxVectorTokens][kRowsPerTile];
};

thread_local Scratch scratch;

inline void zero_meta(int r, RowMeta* meta) {
  meta->d[r] = meta->dmin[r] = 0.0f;
  for (int p = 0; p < 4; ++p) meta->min_pair[p][r] = 0;
}

inline __m512i scale_words(uint64_t bytes) {
  return _mm512_castsi128_si512(
      _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(bytes))));
}

// Pair p of a Q8_K block's 32-element sums: bsum_{2p} | bsum_{2p+1} << 16.
inline int32_t sum_pair(const BlockQ8_K& y, int p) {
  const int lo = y.bsums[4 * p] + y.bsums[4 * p + 1];
  const int hi = y.bsums[4 * p + 2] + y.bsums[4 * p + 3];
  return static_cast<int32_t>(static_cast<uint16_t>(lo) | (static_cast<uint32_t>(hi) << 16));
}

// ---- formats ----
//
// A format F gives the tile unit's side:
//   kATiles, kCTiles       weight tiles per chunk, C tiles per token tile
//   kPairs                 whether a job takes two token tiles (kCTiles <= 2 only)
//   prepare_row(b, r, rt)  row r's weight tiles and meta from block b
//   multiply(rt, toks, tt0, pair, out)      one job's tile products into out's C tiles
//   accumulate_tokens(meta, tok, c, acc)    the float steps of C tiles c, over tokens
// and the vector unit's:
//   Row, unpack(b, r, meta, row)            a row's unpacked block
//   dot(row, y)                             16 lanes whose sum is T
//   accumulate_rows(meta, y, t_int, acc)    the float steps, over rows

// Q4_K / Q5_K: T = 8 * C_hi + C_lo with weight tiles q * s_hi and q * s_lo (see the top).
// The activations are Q8_K blocks in nibble order (kernels_avx512_impl.h: sub-blocks
// stored 0, 2, 1, 3, 4, 6, 5, 7), so unpack_qk4's chunk k meets activation chunk k.
template <bool kFive>
struct K4 {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  static constexpr int kATiles = 2, kCTiles = 2;
  static constexpr bool kPairs = true;

  // Row r's d, dmin and minimum pairs; returns the eight 6-bit scales as bytes.
  static uint64_t meta(const Block& b, int r, RowMeta* m) {
    uint64_t sc8, m8;
    unpack_k4(b.scales, &sc8, &m8);
    uint32_t dd;
    std::memcpy(&dd, &b.d, 4);  // d and dmin are adjacent halves
    const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd)));
    m->d[r] = _mm_cvtss_f32(dm);
    m->dmin[r] = _mm_cvtss_f32(_mm_movehdup_ps(dm));
    // The minimums in the activations' sub-block order, each byte widened to a word.
    const uint64_t mb = nibble_order_bytes(m8);
    const uint64_t lo = _pdep_u64(mb, 0x00FF00FF00FF00FFull),
                   hi = _pdep_u64(mb >> 32, 0x00FF00FF00FF00FFull);
    m->min_pair[0][r] = static_cast<int32_t>(lo);
    m->min_pair[1][r] = static_cast<int32_t>(lo >> 32);
    m->min_pair[2][r] = static_cast<int32_t>(hi);
    m->min_pair[3][r] = static_cast<int32_t>(hi >> 32);
    return sc8;
  }

  // A 16-bit multiply of two packed quants by s <= 7 never carries out of the low byte
  // (31 * 7 < 256).
  static void prepare_row(const Block& b, int r, RowTile* rt) {
    const uint64_t sc8 = meta(b, r, &rt->meta);
    const __m512i hi_w = scale_words((sc8 >> 3) & 0x0707070707070707ull);
    const __m512i lo_w = scale_words(sc8 & 0x0707070707070707ull);
    __m512i W[kChunks], idx[kChunks];
    unpack_qk4<kFive>(b, W);
    qk4_scale_index(idx);
    for (int c = 0; c < kChunks; ++c) {
      _mm512_store_si512(rt->a[0][c] + 64 * r,
                         _mm512_mullo_epi16(W[c], _mm512_permutexvar_epi16(idx[c], hi_w)));
      _mm512_store_si512(rt->a[1][c] + 64 * r,
                         _mm512_mullo_epi16(W[c], _mm512_permutexvar_epi16(idx[c], lo_w)));
    }
  }

  // C hi / lo of token tile tt0 in tmm0 / 1, of tt0 + 1 in tmm2 / 3; weight tiles in
  // tmm4 / 5, activations in tmm6 / 7. (GCC's tile intrinsics paste their register
  // operands into the assembly text, so the numbers are spelled out.)
  static void multiply(const RowTile& rt, const TokTile* toks, int tt0, bool pair, CTiles* out) {
    _tile_zero(0);
    _tile_zero(1);
    if (pair) {
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int c = 0; c < kChunks; ++c) {
      _tile_loadd(6, toks[tt0].b[c], 64);
      _tile_loadd(4, rt.a[0][c], 64);
      _tile_loadd(5, rt.a[1][c], 64);
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(1, 5, 6);
      if (pair) {
        _tile_loadd(7, toks[tt0 + 1].b[c], 64);
        _tile_dpbusd(2, 4, 7);
        _tile_dpbusd(3, 5, 7);
      }
    }
    _tile_stored(0, out->c[0], 64);
    _tile_stored(1, out->c[1], 64);
    if (pair) {
      _tile_stored(2, out->c[2], 64);
      _tile_stored(3, out->c[3], 64);
    }
  }

  static void accumulate_tokens(const RowMeta& rm, const TokTile& tt, const int32_t (*c)[256],
                                float* acc) {
    const __m512 dy = _mm512_load_ps(tt.d);
    __m512i sums[4];
    for (int p = 0; p < 4; ++p) sums[p] = _mm512_load_si512(tt.sum_pair[p]);
    for (int r = 0; r < kRowsPerTile; ++r) {
      const __m512i t_int = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c[0] + 16 * r), 3),
                                             _mm512_load_si512(c[1] + 16 * r));
      __m512i m_int = _mm512_madd_epi16(sums[0], _mm512_set1_epi32(rm.min_pair[0][r]));
      for (int p = 1; p < 4; ++p)
        m_int = _mm512_add_epi32(m_int,
                                 _mm512_madd_epi16(sums[p], _mm512_set1_epi32(rm.min_pair[p][r])));
      const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(rm.d[r]), dy);
      const __m512 dm = _mm512_mul_ps(_mm512_set1_ps(rm.dmin[r]), dy);
      __m512 a = _mm512_load_ps(acc + 16 * r);
      a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t_int), dd, a);
      a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m_int), dm, a);
      _mm512_store_ps(acc + 16 * r, a);
    }
  }

  struct Row {
    __m512i W[kChunks], S[kChunks];
  };
  static void unpack(const Block& b, int r, RowMeta* m, Row* row) {
    const __m512i sw = scale_words(meta(b, r, m));
    __m512i idx[kChunks];
    unpack_qk4<kFive>(b, row->W);
    qk4_scale_index(idx);
    for (int c = 0; c < kChunks; ++c) row->S[c] = _mm512_permutexvar_epi16(idx[c], sw);
  }
  static __m512i dot(const Row& row, const BlockQ8_K& y) {
    __m512i isum = dot_scaled_first(row.W[0], load512(y.qs), row.S[0]);
    for (int c = 1; c < kChunks; ++c)
      isum = dot_scaled(isum, row.W[c], load512(y.qs + 64 * c), row.S[c]);
    return isum;
  }
  static void accumulate_rows(const RowMeta& rm, const BlockQ8_K& y, __m512i t_int, float* acc) {
    __m512i m_int =
        _mm512_madd_epi16(_mm512_load_si512(rm.min_pair[0]), _mm512_set1_epi32(sum_pair(y, 0)));
    for (int p = 1; p < 4; ++p)
      m_int = _mm512_add_epi32(m_int, _mm512_madd_epi16(_mm512_load_si512(rm.min_pair[p]),
                                                        _mm512_set1_epi32(sum_pair(y, p))));
    const __m512 dy = _mm512_set1_ps(y.d);
    const __m512 dd = _mm512_mul_ps(_mm512_load_ps(rm.d), dy);
    const __m512 dm = _mm512_mul_ps(_mm512_load_ps(rm.dmin), dy);
    __m512 a = _mm512_load_ps(acc);
    a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t_int), dd, a);
    a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m_int), dm, a);
    _mm512_store_ps(acc, a);
  }
};

// Q6_K: x = d * sc_j * (q - 32) with signed 8-bit sub-block scales sc_j (16 sub-blocks of
// 16). Its scales do not split into two 3-bit halves whose products with q - 32 stay within
// a byte, so u = sc + 128 (0..255) is written in base 4, u = sum_i 4^i u_i (u_i 0..3), and
// the weight tiles hold (q - 32) * u_i (|.| <= 96) and q - 32 itself; with TDPBSSD
//   T = sum_k sc (q_k - 32) y_k = 64 C_3 + 16 C_2 + 4 C_1 + C_0 - 128 C_q,
// with no activation-sum term. Per output: acc = fma(float(T_i), d_i * dy_i, acc).
struct K6 {
  using Block = BlockQ6_K;
  static constexpr int kATiles = 5, kCTiles = 5;
  static constexpr bool kPairs = false;

  // q * u_i never carries out of a 16-bit lane's low byte (63 * 3 < 256); subtracting
  // 32 * u_i from each byte then gives (q - 32) * u_i.
  static void prepare_row(const Block& b, int r, RowTile* rt) {
    rt->meta.d[r] = h2f(b.d);
    __m512i W[kChunks];
    unpack_q6k(b, W);
    const __m128i u = _mm_xor_si128(load128(b.scales), _mm_set1_epi8(static_cast<char>(0x80)));
    __m512i digit[4], digit32[4];
    for (int i = 0; i < 4; ++i) {
      const __m128i ui = _mm_and_si128(_mm_srli_epi16(u, 2 * i), _mm_set1_epi8(3));
      digit[i] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(ui));
      digit32[i] = _mm512_or_si512(_mm512_slli_epi16(digit[i], 5), _mm512_slli_epi16(digit[i], 13));
    }
    __m512i idx[kChunks];
    k16_scale_index(idx);
    for (int c = 0; c < kChunks; ++c) {
      for (int i = 0; i < 4; ++i) {
        const __m512i p = _mm512_mullo_epi16(W[c], _mm512_permutexvar_epi16(idx[c], digit[i]));
        _mm512_store_si512(rt->a[i][c] + 64 * r,
                           _mm512_sub_epi8(p, _mm512_permutexvar_epi16(idx[c], digit32[i])));
      }
      _mm512_store_si512(rt->a[4][c] + 64 * r, _mm512_sub_epi8(W[c], _mm512_set1_epi8(32)));
    }
  }

  // C_0..C_3 and C_q in tmm0..4; weight tiles alternate between tmm5 and tmm7 so a load
  // need not wait for the previous product to release its register; activations in tmm6.
  static void multiply(const RowTile& rt, const TokTile* toks, int tt0, bool, CTiles* out) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    for (int c = 0; c < kChunks; ++c) {
      _tile_loadd(6, toks[tt0].b[c], 64);
      _tile_loadd(5, rt.a[0][c], 64);
      _tile_dpbssd(0, 5, 6);
      _tile_loadd(7, rt.a[1][c], 64);
      _tile_dpbssd(1, 7, 6);
      _tile_loadd(5, rt.a[2][c], 64);
      _tile_dpbssd(2, 5, 6);
      _tile_loadd(7, rt.a[3][c], 64);
      _tile_dpbssd(3, 7, 6);
      _tile_loadd(5, rt.a[4][c], 64);
      _tile_dpbssd(4, 5, 6);
    }
    _tile_stored(0, out->c[0], 64);
    _tile_stored(1, out->c[1], 64);
    _tile_stored(2, out->c[2], 64);
    _tile_stored(3, out->c[3], 64);
    _tile_stored(4, out->c[4], 64);
  }

  static void accumulate_tokens(const RowMeta& rm, const TokTile& tt, const int32_t (*c)[256],
                                float* acc) {
    const __m512 dy = _mm512_load_ps(tt.d);
    for (int r = 0; r < kRowsPerTile; ++r) {
      __m512i t_int = _mm512_load_si512(c[3] + 16 * r);
      for (int i = 2; i >= 0; --i)
        t_int = _mm512_add_epi32(_mm512_slli_epi32(t_int, 2), _mm512_load_si512(c[i] + 16 * r));
      t_int = _mm512_sub_epi32(t_int, _mm512_slli_epi32(_mm512_load_si512(c[4] + 16 * r), 7));
      __m512 a = _mm512_load_ps(acc + 16 * r);
      a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t_int), _mm512_mul_ps(_mm512_set1_ps(rm.d[r]), dy), a);
      _mm512_store_ps(acc + 16 * r, a);
    }
  }

  struct Row {
    __m512i W[kChunks], S[kChunks];
    __m256i sc16;
  };
  static void unpack(const Block& b, int r, RowMeta* m, Row* row) {
    m->d[r] = h2f(b.d);
    unpack_q6k(b, row->W);
    row->sc16 = _mm256_cvtepi8_epi16(load128(b.scales));
    const __m512i scw = _mm512_broadcast_i64x4(row->sc16);
    __m512i idx[kChunks];
    k16_scale_index(idx);
    for (int c = 0; c < kChunks; ++c) row->S[c] = _mm512_permutexvar_epi16(idx[c], scw);
  }
  // The offset leaves through the per-16 sums: sum sc q y - 32 sum sc bsum.
  static __m512i dot(const Row& row, const BlockQ8_K& y) {
    __m512i isum = dot_scaled_first(row.W[0], load512(y.qs), row.S[0]);
    for (int c = 1; c < kChunks; ++c)
      isum = dot_scaled(isum, row.W[c], load512(y.qs + 64 * c), row.S[c]);
    const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load256(y.bsums), row.sc16), 5);
    return _mm512_sub_epi32(isum, _mm512_inserti64x4(_mm512_setzero_si512(), corr, 0));
  }
  static void accumulate_rows(const RowMeta& rm, const BlockQ8_K& y, __m512i t_int, float* acc) {
    const __m512 dd = _mm512_mul_ps(_mm512_load_ps(rm.d), _mm512_set1_ps(y.d));
    _mm512_store_ps(acc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(t_int), dd, _mm512_load_ps(acc)));
  }
};

// ---- weights and activations into tiles ----

// Asks for the cache lines of the block `ahead` bytes after b into L2. The kernels below
// walk 16 rows at once, so one row's prefetch_ahead (a few KiB further along the row)
// would run into the next rows, already in use, and leave the next tile's first blocks to
// miss; they ask for the same block one tile (or one super-block) ahead instead.
template <class Block>
inline void prefetch_block(const Block* b, size_t ahead) {
  const char* p = reinterpret_cast<const char*>(b) + ahead;
  for (size_t l = 0; l < sizeof(Block); l += 64) _mm_prefetch(p + l, _MM_HINT_T1);
}

// Rows [0, n) of super-block i (rows w_stride bytes apart); rows past n are zero.
template <class F>
void prepare_rows(const uint8_t* w, size_t w_stride, int n, int64_t i, RowTile* rt) {
  for (int r = 0; r < n; ++r) {
    const auto* b = reinterpret_cast<const typename F::Block*>(w + r * w_stride) + i;
    prefetch_block(b, 2 * sizeof(*b));
    F::prepare_row(*b, r, rt);
  }
  for (int r = n; r < kRowsPerTile; ++r) {
    for (int t = 0; t < F::kATiles; ++t)
      for (int c = 0; c < kChunks; ++c)
        _mm512_store_si512(rt->a[t][c] + 64 * r, _mm512_setzero_si512());
    zero_meta(r, &rt->meta);
  }
}

// The 16 x 16 dword transpose: v[k] dword t becomes v[t] dword k.
inline void transpose16(__m512i* v) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  // u[4g + j], 128-bit lane L: column 4L + j of rows 4g .. 4g + 3.
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    const __m512i b = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i c = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
    const __m512i d = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    v[j] = _mm512_shuffle_i32x4(a, b, 0x88);
    v[4 + j] = _mm512_shuffle_i32x4(a, b, 0xDD);
    v[8 + j] = _mm512_shuffle_i32x4(c, d, 0x88);
    v[12 + j] = _mm512_shuffle_i32x4(c, d, 0xDD);
  }
}

// Tokens [0, n) of super-block i into the VNNI layout; missing tokens are zero.
void prepare_tokens(const uint8_t* x, size_t x_stride, int n, int64_t i, TokTile* tt) {
  const BlockQ8_K* y[kToksPerTile];
  for (int t = 0; t < n; ++t) y[t] = reinterpret_cast<const BlockQ8_K*>(x + t * x_stride) + i;
  for (int c = 0; c < kChunks; ++c) {
    __m512i v[16];
    for (int t = 0; t < 16; ++t) v[t] = t < n ? load512(y[t]->qs + 64 * c) : _mm512_setzero_si512();
    transpose16(v);
    for (int k = 0; k < 16; ++k) _mm512_store_si512(tt->b[c] + 64 * k, v[k]);
  }
  for (int t = 0; t < kToksPerTile; ++t) {
    tt->d[t] = t < n ? y[t]->d : 0.0f;
    for (int p = 0; p < 4; ++p) tt->sum_pair[p][t] = t < n ? sum_pair(*y[t], p) : 0;
  }
}

// Lane r of the result: the sum of the 16 lanes of v[r] (exact in integers).
inline __m512i reduce16(const int32_t (*v)[16]) {
  __m512 f[16];
  for (int r = 0; r < 16; ++r) f[r] = _mm512_castsi512_ps(_mm512_load_si512(v[r]));
  return _mm512_castps_si512(fold16(f, [](__m512 a, __m512 b) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }));
}

// ---- tile functions ----

// A per-thread buffer that grows to the largest call (a call's prepared activations, and
// for the 32-element formats its weights: about 3 KiB a block).
class GrowingBuffer {
 public:
  GrowingBuffer() = default;
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer& operator=(const GrowingBuffer&) = delete;
  ~GrowingBuffer() { std::free(data_); }
  // nullptr when the memory is not there.
  uint8_t* get(size_t bytes) {
    if (bytes > size_) {
      std::free(data_);
      size_ = (bytes + 4095) & ~size_t{4095};
      data_ = static_cast<uint8_t*>(std::aligned_alloc(64, size_));
      if (!data_) size_ = 0;
    }
    return data_;
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

thread_local GrowingBuffer call_scratch;

// Few tokens on the vector unit: per super-block each of 16 rows is unpacked once and its
// scaled dot with every token kept as 16 lanes; reduce16 then gives T for all 16 rows.
template <class F>
void tile_vector(int64_t n, const uint8_t* w, size_t w_stride, int n_rows, const uint8_t* x,
                 size_t x_stride, int n_tok, float* y, size_t y_stride) {
  Scratch& s = scratch;
  for (int r0 = 0; r0 < n_rows; r0 += kRowsPerTile) {
    const int nr = std::min(kRowsPerTile, n_rows - r0);
    std::memset(s.acc_rows, 0, sizeof(s.acc_rows));
    for (int64_t i = 0; i < n / quant::kQK_K; ++i) {
      for (int r = 0; r < kRowsPerTile; ++r) {
        if (r >= nr) {
          zero_meta(r, &s.meta);
          for (int t = 0; t < n_tok; ++t) _mm512_store_si512(s.isum[t][r], _mm512_setzero_si512());
          continue;
        }
        const auto& b = reinterpret_cast<const typename F::Block*>(w + (r0 + r) * w_stride)[i];
        prefetch_block(&b, kRowsPerTile * w_stride);
        typename F::Row row;
        F::unpack(b, r, &s.meta, &row);
        for (int t = 0; t < n_tok; ++t) {
          const auto& yb = reinterpret_cast<const BlockQ8_K*>(x + t * x_stride)[i];
          _mm512_store_si512(s.isum[t][r], F::dot(row, yb));
        }
      }
      for (int t = 0; t < n_tok; ++t) {
        const auto& yb = reinterpret_cast<const BlockQ8_K*>(x + t * x_stride)[i];
        F::accumulate_rows(s.meta, yb, reduce16(s.isum[t]), s.acc_rows[t]);
      }
    }
    for (int t = 0; t < n_tok; ++t)
      for (int r = 0; r < nr; ++r) y[t * y_stride + r0 + r] = s.acc_rows[t][r];
  }
}

// A job whose C tiles wait for their float steps: they run one job later, so the vector
// loads of the C tiles do not wait on the tile stores, nor the tile loads on the vector
// stores that prepared them (such round trips through memory stall for tens of cycles).
struct Pending {
  const CTiles* c = nullptr;
  const RowMeta* rows = nullptr;
  const TokTile* toks = nullptr;  // the job's first token tile
  float* acc[2] = {};             // its accumulators (the second: pairs only)
};

template <class F>
void finish(const Pending& p) {
  if (!p.c) return;
  F::accumulate_tokens(*p.rows, p.toks[0], p.c->c, p.acc[0]);
  if (p.acc[1]) F::accumulate_tokens(*p.rows, p.toks[1], p.c->c + F::kCTiles, p.acc[1]);
}

// Many tokens on the tile unit, their activation tiles prepared (toks[i * kMaxTokTiles + tt]:
// super-block i, token tile tt). Steps (super-block, row tile) in order; each step's jobs
// take the token tiles one or two at a time. The next step's weight tiles are prepared
// after the step's first job, into the other buffer.
template <class F>
void tile_matrix(int64_t n, const uint8_t* w, size_t w_stride, int n_rows, const TokTile* toks_all,
                 int n_tok, float* y, size_t y_stride) {
  _tile_loadconfig(&tile_config());
  Scratch& s = scratch;
  const int n_rt = (n_rows + kRowsPerTile - 1) / kRowsPerTile;
  const int n_tt = (n_tok + kToksPerTile - 1) / kToksPerTile;
  const int64_t n_sb = n / quant::kQK_K;
  for (int rt = 0; rt < n_rt; ++rt)
    for (int tt = 0; tt < n_tt; ++tt) std::memset(s.acc[rt][tt], 0, sizeof(s.acc[rt][tt]));
  auto prep_rows = [&](int64_t i, int rt, RowTile* dst) {
    prepare_rows<F>(w + rt * kRowsPerTile * w_stride, w_stride,
                    std::min(kRowsPerTile, n_rows - rt * kRowsPerTile), i, dst);
  };
  prep_rows(0, 0, &s.rows[0]);
  Pending pending;
  int slot = 0;
  const int per_job = F::kPairs ? 2 : 1;
  const int64_t n_steps = n_sb * n_rt;
  for (int64_t step = 0; step < n_steps; ++step) {
    const int64_t i = step / n_rt;
    const int rt = static_cast<int>(step % n_rt);
    const RowTile& rows = s.rows[step & 1];
    const TokTile* toks = toks_all + i * kMaxTokTiles;
    for (int tt = 0; tt < n_tt; tt += per_job) {
      const bool pair = F::kPairs && tt + 1 < n_tt;
      F::multiply(rows, toks, tt, pair, &s.c[slot]);
      finish<F>(pending);
      pending = Pending{
          &s.c[slot], &rows.meta, toks + tt, {s.acc[rt][tt], pair ? s.acc[rt][tt + 1] : nullptr}};
      slot ^= 1;
      if (tt == 0 && step + 1 < n_steps) {
        prep_rows((step + 1) / n_rt, static_cast<int>((step + 1) % n_rt), &s.rows[(step + 1) & 1]);
      }
    }
  }
  finish<F>(pending);
  // Leaving the tile state in use would make every context switch of this thread save and
  // restore its 8 KiB of tile data (the pool's threads sleep and wake once per product).
  _tile_release();
  for (int rt = 0; rt < n_rt; ++rt)
    for (int tt = 0; tt < n_tt; ++tt)
      for (int r = 0; r < std::min(kRowsPerTile, n_rows - rt * kRowsPerTile); ++r)
        for (int t = 0; t < std::min(kToksPerTile, n_tok - tt * kToksPerTile); ++t)
          y[(tt * kToksPerTile + t) * y_stride + rt * kRowsPerTile + r] =
              s.acc[rt][tt][kToksPerTile * r + t];
}

template <class F>
void tile_amx(int64_t n, const void* w, size_t w_stride, int n_rows, const void* x, size_t x_stride,
              int n_tok, float* y, size_t y_stride) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  const int64_t n_sb = n / quant::kQK_K;
  // Calls of more than 64 tokens are cut here, and of more than 64 rows within a token chunk,
  // whose activation tiles are prepared once for all its rows.
  for (int t0 = 0; t0 < n_tok;) {
    const int left = n_tok - t0;
    int nt = left <= kMaxVectorTokens ? left : std::min(kMaxTokTiles * kToksPerTile, left);
    const uint8_t* xt = xb + t0 * x_stride;
    TokTile* toks = nullptr;
    if (nt > kMaxVectorTokens) {
      toks = reinterpret_cast<TokTile*>(call_scratch.get(n_sb * kMaxTokTiles * sizeof(TokTile)));
      // No memory for the tiles: the vector unit, a few tokens at a time.
      if (toks == nullptr) nt = kMaxVectorTokens;
    }
    if (toks != nullptr) {
      for (int64_t i = 0; i < n_sb; ++i) {
        for (int tt = 0; tt * kToksPerTile < nt; ++tt) {
          prepare_tokens(xt + tt * kToksPerTile * x_stride, x_stride,
                         std::min(kToksPerTile, nt - tt * kToksPerTile), i,
                         &toks[i * kMaxTokTiles + tt]);
        }
      }
    }
    for (int r0 = 0; r0 < n_rows; r0 += kMaxRowTiles * kRowsPerTile) {
      const int nr = std::min(kMaxRowTiles * kRowsPerTile, n_rows - r0);
      const uint8_t* wr = wb + r0 * w_stride;
      float* yt = y + t0 * y_stride + r0;
      if (toks == nullptr) {
        tile_vector<F>(n, wr, w_stride, nr, xt, x_stride, nt, yt, y_stride);
      } else {
        tile_matrix<F>(n, wr, w_stride, nr, toks, nt, yt, y_stride);
      }
    }
    t0 += nt;
  }
}

// ---- 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4) on the tile unit ----
//
// A 32-element block has a scale of its own, so one tile product covers one block (K = 32)
// and its exact integer dots leave in a C tile before the next block's: A = 16 tokens'
// quants of the block (16 x 32 bytes), B = the block of 16 weight rows in the VNNI layout
// (row k: dword k of each row's block, which is what unsigned_weights() gives, less the
// offset), C = 16 tokens x 16 rows. The float steps that follow are Rows32's
// (kernels_avx512_impl.h): a vector per token with the rows in its lanes, partial j taking
// blocks j, j + 16, ... in order, the partials summed in hsum512's order. So every output
// is Rows32's (and Legacy32's) bit for bit, and calls of few tokens go to Rows32.
//
// Q4_1 and Q5_1 take their second sum (minimums times activation sums) as Rows32 does,
// before the products. Half the depth of the K-quants' products (K = 64) and a C tile stored
// per product, so the gain over Rows32 is smaller than theirs (docs/BENCHMARKS.md, "CPU
// kernels").

// tmm0 / 1: C (16 tokens x 16 rows); tmm2 / 3: A (16 tokens x 32 quants); tmm4 / 5: B (8
// rows of 16 weight rows x 4 quants). Two of each, so that one block's dots are read while
// the next block's product runs.
const TileConfig& block32_config() {
  static const TileConfig config = [] {
    TileConfig c;
    for (int t = 0; t < 6; ++t) {
      c.rows[t] = 16;
      c.colsb[t] = 64;
    }
    c.colsb[2] = c.colsb[3] = 32;
    c.rows[4] = c.rows[5] = 8;
    return c;
  }();
  return config;
}

template <class WF>
struct Amx32 {
  using R = Rows32<WF>;
  using Block = typename WF::Block;
  using Unpacked = typename R::Unpacked;
  static constexpr int kMinTokens = 16;       // fewer: Rows32
  static constexpr int64_t kMaxBlocks = 512;  // wider rows (16384 columns): Rows32
  static constexpr int kMaxTokens = kMaxTokTiles * kToksPerTile;
  static constexpr size_t kActTile = kToksPerTile * quant::kQK;  // bytes of one A tile
  static constexpr int kCTile = kToksPerTile * kLanes;           // int32 of one C tile

  static size_t align64(size_t bytes) { return (bytes + 63) & ~size_t{63}; }

  // Tokens [0, n) of every block as A tiles, act + b * kActTile (token t's quants of block b
  // in row t); rows past n are zero. A token's group row k holds dword k of its blocks, so a
  // 16 x 16 dword transpose of the 8 rows (and 8 zero rows) gives block j's 32 quants in the
  // low half of vector j.
  static void prepare_tokens(int64_t nb, const uint8_t* x, size_t xs, int n, int8_t* act) {
    for (int64_t b0 = 0; b0 < nb; b0 += kLanes) {
      const int m = group_size(nb, b0);
      for (int t = 0; t < kToksPerTile; ++t) {
        __m512i v[16];
        for (int k = 0; k < 16; ++k) v[k] = _mm512_setzero_si512();
        if (t < n) {
          const ActGroup g{x + t * xs + b0 * R::kActBlock, m};
          for (int k = 0; k < 8; ++k) v[k] = g.row(k, R::kFields);
          transpose16(v);
        }
        for (int j = 0; j < m; ++j) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(act + (b0 + j) * kActTile + 32 * t),
                             _mm512_castsi512_si256(v[j]));
        }
      }
    }
  }

  // Rows [0, m) of every block as B tiles (u[b].w) with their scales, less the offset, so
  // that the tile unit's signed product gives the exact dot at once.
  static void prepare_rows(int64_t nb, const uint8_t* w, size_t ws, int m, Unpacked* u) {
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(WF::kOffset));
    for (int64_t b = 0; b < nb; ++b) {
      R::unpack(w + b * sizeof(Block), ws, m, &u[b]);
      for (int k = 0; k < 8; ++k) u[b].w[k] = _mm512_sub_epi8(u[b].w[k], offset);
    }
  }

  // One block's exact dots into c (token t's 16 rows at c + 16 t), on tile slot S. (GCC's
  // tile intrinsics take literal tile numbers.)
  template <int S>
  static void product(const Unpacked& u, const int8_t* a, int32_t* c) {
    if constexpr (S == 0) {
      _tile_zero(0);
      _tile_loadd(2, a, 32);
      _tile_loadd(4, u.w, 64);
      _tile_dpbssd(0, 2, 4);
      _tile_stored(0, c, 64);
    } else {
      _tile_zero(1);
      _tile_loadd(3, a, 32);
      _tile_loadd(5, u.w, 64);
      _tile_dpbssd(1, 3, 5);
      _tile_stored(1, c, 64);
    }
  }

  // Rows32's float steps of block b for the tile's tokens: part[t][b % 16] takes the block's
  // dots, the first block of each partial starting it from zero.
  static void step(const Unpacked& u, int64_t b, int64_t nb, const int32_t* c, int nt,
                   const float* scales, __m512 (*part)[kLanes]) {
    const int j = static_cast<int>(b % kLanes);
    const bool first = b < kLanes;
    for (int t = 0; t < nt; ++t) {
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(c + kLanes * t));
      part[t][j] = _mm512_fmadd_ps(dot, _mm512_mul_ps(u.d, _mm512_set1_ps(scales[t * nb + b])),
                                   first ? _mm512_setzero_ps() : part[t][j]);
    }
  }

  // One row tile (m rows) against one token tile (nt tokens): each block's product runs
  // while the float steps read the dots stored kLag blocks earlier (the tile store's latency
  // is exposed with less). The formats with a minimum add Rows32's second sum, taken first
  // into the same partials (mins: 16 tokens' terms, zero past nt).
  static void blocks(int64_t nb, const Unpacked* u, const int8_t* act, const float* scales,
                     const float* mins, int nt, int m, float* y, size_t ys) {
    alignas(64) __m512 part[kToksPerTile][kLanes];
    __m512 min_sums[R::kMin ? kToksPerTile : 1];
    if constexpr (R::kMin) {
      R::template min_partials<kToksPerTile, true>(nb, nullptr, 0, m, u, mins, part);
      for (int t = 0; t < nt; ++t) min_sums[t] = R::sum16(part[t]);
    }
    constexpr int kLag = 2;
    alignas(64) int32_t c[kLag + 1][kCTile];
    for (int64_t b = 0; b < nb; ++b) {
      if (b & 1) {
        product<1>(u[b], act + b * kActTile, c[b % (kLag + 1)]);
      } else {
        product<0>(u[b], act + b * kActTile, c[b % (kLag + 1)]);
      }
      if (b >= kLag) step(u[b - kLag], b - kLag, nb, c[(b - kLag) % (kLag + 1)], nt, scales, part);
    }
    for (int64_t b = std::max<int64_t>(0, nb - kLag); b < nb; ++b)
      step(u[b], b, nb, c[b % (kLag + 1)], nt, scales, part);
    for (int j = static_cast<int>(nb); j < kLanes; ++j) {  // rows of fewer than 16 blocks
      for (int t = 0; t < nt; ++t) part[t][j] = _mm512_setzero_ps();
    }
    const __mmask16 mask = lane_mask(m);
    for (int t = 0; t < nt; ++t) {
      __m512 out = R::sum16(part[t]);
      if constexpr (R::kMin) out = _mm512_add_ps(out, min_sums[t]);
      _mm512_mask_storeu_ps(y + t * ys, mask, out);
    }
  }

  // Up to kMaxTokens tokens: the activations are prepared once for all row tiles, each row
  // tile's weights once for all token tiles.
  static bool tile_tokens(int64_t nb, const uint8_t* w, size_t ws, int n_rows, const uint8_t* x,
                          size_t xs, int n_tok, float* y, size_t ys) {
    const int n_tt = (n_tok + kToksPerTile - 1) / kToksPerTile;
    const size_t act_bytes = align64(n_tt * nb * kActTile);
    const size_t scale_bytes = align64(n_tok * nb * sizeof(float));
    const size_t min_bytes = R::kMin ? align64(n_tt * kToksPerTile * nb * sizeof(float)) : 0;
    uint8_t* buf = call_scratch.get(act_bytes + scale_bytes + min_bytes + nb * sizeof(Unpacked));
    if (!buf) return false;
    auto* act = reinterpret_cast<int8_t*>(buf);
    auto* scales = reinterpret_cast<float*>(buf + act_bytes);
    auto* mins = reinterpret_cast<float*>(buf + act_bytes + scale_bytes);
    auto* u = reinterpret_cast<Unpacked*>(buf + act_bytes + scale_bytes + min_bytes);
    for (int tt = 0; tt < n_tt; ++tt) {
      prepare_tokens(nb, x + tt * kToksPerTile * xs, xs,
                     std::min(kToksPerTile, n_tok - tt * kToksPerTile), act + tt * nb * kActTile);
    }
    R::act_scales(nb, x, xs, n_tok, scales, mins);
    if constexpr (R::kMin) {  // the last token tile's missing tokens add nothing
      for (int64_t i = n_tok * nb; i < n_tt * kToksPerTile * nb; ++i) mins[i] = 0.0f;
    }
    _tile_loadconfig(&block32_config());
    for (int r0 = 0; r0 < n_rows; r0 += kLanes) {
      const int m = std::min(kLanes, n_rows - r0);
      prepare_rows(nb, w + r0 * ws, ws, m, u);
      for (int tt = 0; tt < n_tt; ++tt) {
        const int t0 = tt * kToksPerTile;
        blocks(nb, u, act + tt * nb * kActTile, scales + t0 * nb, mins + t0 * nb,
               std::min(kToksPerTile, n_tok - t0), m, y + t0 * ys + r0, ys);
      }
    }
    _tile_release();  // see tile_matrix
    return true;
  }

  static void tile(int64_t n, const void* w, size_t w_stride, int n_rows, const void* x,
                   size_t x_stride, int n_tok, float* y, size_t y_stride) {
    const int64_t nb = n / quant::kQK;
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* xb = static_cast<const uint8_t*>(x);
    int t0 = 0;
    if (nb <= kMaxBlocks) {
      for (; n_tok - t0 >= kMinTokens; t0 += kMaxTokens) {
        const int nt = std::min(kMaxTokens, n_tok - t0);
        if (!tile_tokens(nb, wb, w_stride, n_rows, xb + t0 * x_stride, x_stride, nt,
                         y + t0 * y_stride, y_stride)) {
          break;
        }
      }
    }
    if (t0 < n_tok) {
      R::tile(n, w, w_stride, n_rows, xb + t0 * x_stride, x_stride, n_tok - t0, y + t0 * y_stride,
              y_stride);
    }
  }
};

// The tile unit's own peak: four independent TDPBUSD chains on zeroed tiles (16 x 16 x 64
// multiply-accumulates each), timed in rounds until `seconds` have passed. The Q4_K
// kernels run two TDPBUSD per 64 products (q * s_hi and q * s_lo), so they reach at most
// half of it.
double int8_peak_amx(double seconds) {
  _tile_loadconfig(&tile_config());
  alignas(64) static const int8_t zeros[kTileBytes] = {};
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  constexpr int64_t kRound = 1 << 12;
  const double rate = rounds_per_second(seconds, [] {
    for (int64_t it = 0; it < kRound; ++it) {
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(1, 4, 7);
      _tile_dpbusd(2, 5, 6);
      _tile_dpbusd(3, 5, 7);
    }
  });
  _tile_release();
  return rate * kRound * 4 * (16 * 16 * 64);
}

}  // namespace

void fill_amx_kernels(KernelTable* table) {
  fill_avx512_table(table);
  table->tile[static_cast<int>(gguf::GgmlType::Q4_K)] = tile_amx<K4<false>>;
  table->tile[static_cast<int>(gguf::GgmlType::Q5_K)] = tile_amx<K4<true>>;
  table->tile[static_cast<int>(gguf::GgmlType::Q6_K)] = tile_amx<K6>;
  table->tile[static_cast<int>(gguf::GgmlType::Q8_0)] = Amx32<WQ8_0>::tile;
  table->tile[static_cast<int>(gguf::GgmlType::Q4_0)] = Amx32<WQ4_0>::tile;
  table->tile[static_cast<int>(gguf::GgmlType::Q5_0)] = Amx32<WQ5_0>::tile;
  table->tile[static_cast<int>(gguf::GgmlType::MXFP4)] = Amx32<WMXFP4>::tile;
  table->tile[static_cast<int>(gguf::GgmlType::Q4_1)] = Amx32<WQ4_1>::tile;
  table->tile[static_cast<int>(gguf::GgmlType::Q5_1)] = Amx32<WQ5_1>::tile;
  table->quantize_act[static_cast<int>(gguf::GgmlType::Q4_K)] = quantize_q8_k_nibble_order;
  table->quantize_act[static_cast<int>(gguf::GgmlType::Q5_K)] = quantize_q8_k_nibble_order;
  table->int8_peak = int8_peak_amx;
}

}  // namespace hypura::compute
