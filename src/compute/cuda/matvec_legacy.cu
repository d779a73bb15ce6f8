// Matrix-vector products of the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4)
// with activations in Q8_0 (Q4_0, Q5_0, Q8_0, MXFP4) or Q8_1 (Q4_1, Q5_1), as on the CPU.
// Two chunks per block: a chunk is 8 bytes of nibbles (elements j..j+7 and j+16..j+23) or,
// for Q8_0, 16 quants. The blocks are 2-byte aligned, so quants load as pairs of halves;
// MXFP4's 17-byte blocks are not, and load as the aligned words around them.
#include "compute/cuda/matvec_impl.cuh"

namespace hypura::compute::cuda {
namespace {

using quant::kQK;

// Layout of a 4- or 5-bit block: offsets of d, m (or -1), qh (or -1) and qs.
template <int kBytes, int kM, int kQh, int kQs>
struct Legacy4 {
  static constexpr int kBlockBytes = kBytes, kBlockElems = kQK, kChunks = 2;
  static constexpr bool kHasMin = kM >= 0, kFive = kQh >= 0;
  struct Chunk {
    int lo[2], hi[2];  // elements j..j+7 and j+16..j+23, with Q5's high bits
    float d, m;        // m: the minimum (with kHasMin, chunk 0 only)
  };

  static __device__ __forceinline__ Chunk load(const uint8_t* w, int c) {
    const uint8_t* qs = w + kQs + 8 * c;
    const int v[2] = {load_int_a2(qs), load_int_a2(qs + 4)};
    uint32_t qh = 0;
    if constexpr (kFive) qh = static_cast<uint32_t>(load_int_a2(w + kQh));
    Chunk k;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      k.lo[j] = v[j] & 0x0F0F0F0F;
      k.hi[j] = (v[j] >> 4) & 0x0F0F0F0F;
      if constexpr (kFive) {
        k.lo[j] |= spread_bits4((qh >> (8 * c + 4 * j)) & 0xF);
        k.hi[j] |= spread_bits4((qh >> (16 + 8 * c + 4 * j)) & 0xF);
      }
    }
    k.d = half_bits_to_float(load_u16(w));
    k.m = kHasMin && c == 0 ? half_bits_to_float(load_u16(w + kM)) : 0.0f;
    return k;
  }

  static __device__ __forceinline__ float dot(const uint8_t* w, const ActQ8& act, int b, int c) {
    const uint8_t* qs = w + kQs + 8 * c;
    const int8_t* xq = act.q + b * kQK + 8 * c;
    const int v[2] = {load_int_a2(qs), load_int_a2(qs + 4)};
    const int xlo[2] = {load_int_a4(reinterpret_cast<const uint8_t*>(xq)),
                        load_int_a4(reinterpret_cast<const uint8_t*>(xq + 4))};
    const int xhi[2] = {load_int_a4(reinterpret_cast<const uint8_t*>(xq + 16)),
                        load_int_a4(reinterpret_cast<const uint8_t*>(xq + 20))};
    uint32_t qh = 0;
    if constexpr (kFive) qh = static_cast<uint32_t>(load_int_a2(w + kQh));
    int sumi = 0, sx = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      int lo = v[k] & 0x0F0F0F0F, hi = (v[k] >> 4) & 0x0F0F0F0F;
      if constexpr (kFive) {
        lo |= spread_bits4((qh >> (8 * c + 4 * k)) & 0xF);
        hi |= spread_bits4((qh >> (16 + 8 * c + 4 * k)) & 0xF);
      }
      sumi = __dp4a(lo, xlo[k], sumi);
      sumi = __dp4a(hi, xhi[k], sumi);
      sx = byte_sum(xlo[k], byte_sum(xhi[k], sx));
    }
    const float dw = half_bits_to_float(load_u16(w));
    if constexpr (kHasMin) {
      // x = d q + m: the minimum meets s = d_x * sum(q_x) of the whole block, once.
      const float r = static_cast<float>(sumi) * (dw * act.d[b]);
      return c == 0 ? r + half_bits_to_float(load_u16(w + kM)) * act.s[b] : r;
    } else {
      const int offset = kFive ? 16 : 8;  // x = d (q - offset)
      return static_cast<float>(sumi - offset * sx) * (dw * act.d[b]);
    }
  }
  static __device__ __forceinline__ float dot(const Chunk& k, const ActQ8& act, int b, int c) {
    const int8_t* xq = act.q + b * kQK + 8 * c;
    const int xlo[2] = {load_int_a4(reinterpret_cast<const uint8_t*>(xq)),
                        load_int_a4(reinterpret_cast<const uint8_t*>(xq + 4))};
    const int xhi[2] = {load_int_a4(reinterpret_cast<const uint8_t*>(xq + 16)),
                        load_int_a4(reinterpret_cast<const uint8_t*>(xq + 20))};
    int sumi = 0, sx = 0;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      sumi = __dp4a(k.lo[j], xlo[j], sumi);
      sumi = __dp4a(k.hi[j], xhi[j], sumi);
      sx = byte_sum(xlo[j], byte_sum(xhi[j], sx));
    }
    if constexpr (kHasMin) {
      // x = d q + m: the minimum meets s = d_x * sum(q_x) of the whole block, once.
      const float r = static_cast<float>(sumi) * (k.d * act.d[b]);
      return c == 0 ? r + k.m * act.s[b] : r;
    } else {
      const int offset = kFive ? 16 : 8;  // x = d (q - offset)
      return static_cast<float>(sumi - offset * sx) * (k.d * act.d[b]);
    }
  }
};

using Q4_0 = Legacy4<18, -1, -1, 2>;
using Q4_1 = Legacy4<20, 2, -1, 4>;
using Q5_0 = Legacy4<22, -1, 2, 6>;
using Q5_1 = Legacy4<24, 2, 4, 8>;

struct Q8_0 {
  static constexpr int kBlockBytes = 34, kBlockElems = kQK, kChunks = 2;
  struct Chunk {
    int q[4];  // 16 quants
    float d;
  };
  static __device__ __forceinline__ Chunk load(const uint8_t* w, int c) {
    const uint8_t* qs = w + 2 + 16 * c;
    Chunk k;
#pragma unroll
    for (int j = 0; j < 4; ++j) k.q[j] = load_int_a2(qs + 4 * j);
    k.d = half_bits_to_float(load_u16(w));
    return k;
  }
  static __device__ __forceinline__ float dot(const uint8_t* w, const ActQ8& act, int b, int c) {
    const uint8_t* qs = w + 2 + 16 * c;
    const auto* xq = reinterpret_cast<const int4*>(act.q + b * kQK + 16 * c);
    const int4 x = *xq;
    int sumi = __dp4a(load_int_a2(qs), x.x, 0);
    sumi = __dp4a(load_int_a2(qs + 4), x.y, sumi);
    sumi = __dp4a(load_int_a2(qs + 8), x.z, sumi);
    sumi = __dp4a(load_int_a2(qs + 12), x.w, sumi);
    return static_cast<float>(sumi) * (half_bits_to_float(load_u16(w)) * act.d[b]);
  }
  static __device__ __forceinline__ float dot(const Chunk& k, const ActQ8& act, int b, int c) {
    const int4 x = *reinterpret_cast<const int4*>(act.q + b * kQK + 16 * c);
    int sumi = __dp4a(k.q[0], x.x, 0);
    sumi = __dp4a(k.q[1], x.y, sumi);
    sumi = __dp4a(k.q[2], x.z, sumi);
    sumi = __dp4a(k.q[3], x.w, sumi);
    return static_cast<float>(sumi) * (k.d * act.d[b]);
  }
};

// MXFP4: the codes become their doubled E2M1 values (mxfp4_values4), then dot as Q4_0.
struct MXFP4 {
  static constexpr int kBlockBytes = 17, kBlockElems = kQK, kChunks = 2;
  struct Chunk {
    int lo[2], hi[2];  // the values of elements j..j+7 and j+16..j+23
    float d;
  };
  static __device__ __forceinline__ Chunk load(const uint8_t* w, int c) {
    int v[2];
    load_8_a1(w + 1 + 8 * c, v);
    Chunk k;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      k.lo[j] = mxfp4_values4(static_cast<uint32_t>(v[j]) & 0x0F0F0F0Fu);
      k.hi[j] = mxfp4_values4((static_cast<uint32_t>(v[j]) >> 4) & 0x0F0F0F0Fu);
    }
    k.d = e8m0_half_to_float(w[0]);
    return k;
  }
  static __device__ __forceinline__ float dot(const uint8_t* w, const ActQ8& act, int b, int c) {
    int words[2];
    load_8_a1(w + 1 + 8 * c, words);
    const auto* xq = reinterpret_cast<const uint8_t*>(act.q + b * kQK + 8 * c);
    int sumi = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const auto v = static_cast<uint32_t>(words[k]);
      sumi = __dp4a(mxfp4_values4(v & 0x0F0F0F0Fu), load_int_a4(xq + 4 * k), sumi);
      sumi = __dp4a(mxfp4_values4((v >> 4) & 0x0F0F0F0Fu), load_int_a4(xq + 16 + 4 * k), sumi);
    }
    return static_cast<float>(sumi) * (e8m0_half_to_float(w[0]) * act.d[b]);
  }
  static __device__ __forceinline__ float dot(const Chunk& k, const ActQ8& act, int b, int c) {
    const auto* xq = reinterpret_cast<const uint8_t*>(act.q + b * kQK + 8 * c);
    int sumi = 0;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      sumi = __dp4a(k.lo[j], load_int_a4(xq + 4 * j), sumi);
      sumi = __dp4a(k.hi[j], load_int_a4(xq + 16 + 4 * j), sumi);
    }
    return static_cast<float>(sumi) * (k.d * act.d[b]);
  }
};

}  // namespace

bool launch_matvec_legacy(uint32_t type_id, const MatvecArgs& a) {
  switch (type_id) {
    case 2:
      launch_matvec<Q4_0>(a);
      return true;
    case 3:
      launch_matvec<Q4_1>(a);
      return true;
    case 6:
      launch_matvec<Q5_0>(a);
      return true;
    case 7:
      launch_matvec<Q5_1>(a);
      return true;
    case 8:
      launch_matvec<Q8_0>(a);
      return true;
    case 39:
      launch_matvec<MXFP4>(a);
      return true;
    default:
      return false;
  }
}

}  // namespace hypura::compute::cuda
