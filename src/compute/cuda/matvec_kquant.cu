// Matrix-vector products of the K-quants (Q2_K .. Q6_K) with Q8_K activations, as on the
// CPU. A chunk is 16 bytes of low quants (one 16-byte load for Q4_K / Q5_K, whose blocks
// are 16-byte aligned in 16-byte aligned rows) covering two or four 16-element sub-blocks;
// the per-sub-block scales multiply integer dot products, the minimums (Q2_K, Q4_K, Q5_K)
// meet the activation sums of the same sub-blocks, recomputed with dp4a.
#include "compute/cuda/matvec_impl.cuh"

namespace hypura::compute::cuda {
namespace {

using quant::kQK_K;

// Dot of 16 weight quants (four ints of bytes) with 16 activation quants, and their sum.
struct Dot16 {
  int sumi = 0, sx = 0;
};
__device__ __forceinline__ Dot16 dot16(const int (&v)[4], const int8_t* xq) {
  const int4 x = *reinterpret_cast<const int4*>(xq);
  Dot16 r;
  r.sumi = __dp4a(v[0], x.x, __dp4a(v[1], x.y, __dp4a(v[2], x.z, __dp4a(v[3], x.w, 0))));
  r.sx = byte_sum(x.x, byte_sum(x.y, byte_sum(x.z, byte_sum(x.w, 0))));
  return r;
}

__device__ __forceinline__ void load16_a4(const uint8_t* p, int (&v)[4]) {
  const int4 q = *reinterpret_cast<const int4*>(p);  // REQUIRES: p 16-byte aligned
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
__device__ __forceinline__ void load16_a2(const uint8_t* p, int (&v)[4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] = load_int_a2(p + 4 * k);
}

// Scale and min of sub-block j of a Q4_K / Q5_K block (as quant::unpack_scale_min_k4).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// d_x * d * isum - d_x * dmin * summs in the CPU's order (Q2_K, Q4_K, Q5_K); d and dmin
// the block's fp16 scales, widened.
__device__ __forceinline__ float scale_and_min(float dx, float d, float dmin, int isum, int summs) {
  return dx * d * static_cast<float>(isum) - dx * dmin * static_cast<float>(summs);
}

struct Q2_K {
  static constexpr int kBlockBytes = 84, kBlockElems = kQK_K, kChunks = 4;
  struct Chunk {
    int v[4], sc[4];  // 2-bit quants of four sub-blocks; their scale-and-min bytes
    float d, dmin;
  };
  static __device__ __forceinline__ Chunk load(const uint8_t* w, int c) {
    const int cc = c / 2, mh = c % 2;
    Chunk k;
#pragma unroll
    for (int j = 0; j < 4; ++j) k.v[j] = load_int_a4(w + 16 + cc * 32 + 16 * mh + 4 * j);
#pragma unroll
    for (int s = 0; s < 4; ++s) k.sc[s] = w[cc * 8 + 2 * s + mh];
    k.d = half_bits_to_float(load_u16(w + 80));
    k.dmin = half_bits_to_float(load_u16(w + 82));
    return k;
  }
  static __device__ __forceinline__ float dot(const uint8_t* w, const ActQ8& act, int b, int c) {
    const int cc = c / 2, mh = c % 2;
    int v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = load_int_a4(w + 16 + cc * 32 + 16 * mh + 4 * k);
    const int8_t* xq = act.q + b * kQK_K + cc * 128 + 16 * mh;
    int isum = 0, summs = 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      int q[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) q[k] = (v[k] >> (2 * s)) & 0x03030303;
      const Dot16 r = dot16(q, xq + 32 * s);
      const int sc = w[cc * 8 + 2 * s + mh];
      isum += (sc & 0xF) * r.sumi;
      summs += (sc >> 4) * r.sx;
    }
    return scale_and_min(act.d[b], half_bits_to_float(load_u16(w + 80)),
                         half_bits_to_float(load_u16(w + 82)), isum, summs);
  }
  static __device__ __forceinline__ float dot(const Chunk& k, const ActQ8& act, int b, int c) {
    const int cc = c / 2, mh = c % 2;
    const int8_t* xq = act.q + b * kQK_K + cc * 128 + 16 * mh;
    int isum = 0, summs = 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      int q[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) q[j] = (k.v[j] >> (2 * s)) & 0x03030303;
      const Dot16 r = dot16(q, xq + 32 * s);
      isum += (k.sc[s] & 0xF) * r.sumi;
      summs += (k.sc[s] >> 4) * r.sx;
    }
    return scale_and_min(act.d[b], k.d, k.dmin, isum, summs);
  }
};

struct Q3_K {
  static constexpr int kBlockBytes = 110, kBlockElems = kQK_K, kChunks = 4;
  struct Chunk {
    int v[4], hm[4], scale[4];  // low quants, high-bit masks, four sub-blocks' scales
    float d;
  };
  static __device__ __forceinline__ Chunk load(const uint8_t* w, int c) {
    const int cc = c / 2, mh = c % 2;
    Chunk k;
    load16_a2(w + 32 + cc * 32 + 16 * mh, k.v);
    load16_a2(w + 16 * mh, k.hm);
    const uint8_t* packed = w + 96;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int j = cc * 8 + 2 * s + mh;
      const int low = (packed[j % 8] >> (4 * (j / 8))) & 0xF;
      const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
      k.scale[s] = (low | (high << 4)) - 32;
    }
    k.d = half_bits_to_float(load_u16(w + 108));
    return k;
  }
  static __device__ __forceinline__ float dot(const uint8_t* w, const ActQ8& act, int b, int c) {
    const int cc = c / 2, mh = c % 2;
    int v[4], hm[4];
    load16_a2(w + 32 + cc * 32 + 16 * mh, v);
    load16_a2(w + 16 * mh, hm);
    const int8_t* xq = act.q + b * kQK_K + cc * 128 + 16 * mh;
    const uint8_t* packed = w + 96;
    int isum = 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      int q[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        q[k] = ((v[k] >> (2 * s)) & 0x03030303) | (((hm[k] >> (cc * 4 + s)) & 0x01010101) << 2);
      }
      const Dot16 r = dot16(q, xq + 32 * s);
      const int j = cc * 8 + 2 * s + mh;
      const int low = (packed[j % 8] >> (4 * (j / 8))) & 0xF;
      const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
      isum += ((low | (high << 4)) - 32) * (r.sumi - 4 * r.sx);  // q - 4 * !hbit
    }
    return act.d[b] * half_bits_to_float(load_u16(w + 108)) * static_cast<float>(isum);
  }
  static __device__ __forceinline__ float dot(const Chunk& k, const ActQ8& act, int b, int c) {
    const int cc = c / 2, mh = c % 2;
    const int8_t* xq = act.q + b * kQK_K + cc * 128 + 16 * mh;
    int isum = 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      int q[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        q[j] = ((k.v[j] >> (2 * s)) & 0x03030303) | (((k.hm[j] >> (cc * 4 + s)) & 0x01010101) << 2);
      }
      const Dot16 r = dot16(q, xq + 32 * s);
      isum += k.scale[s] * (r.sumi - 4 * r.sx);  // q - 4 * !hbit
    }
    return act.d[b] * k.d * static_cast<float>(isum);
  }
};

// Q4_K (kFive = false) and Q5_K: chunk c covers bytes 16 * (c % 2) .. + 16 of the 32-byte
// quant group c / 2, i.e. 16 elements of sub-block 2p (low nibbles) and 16 of 2p + 1.
template <bool kFive>
struct K4 {
  static constexpr int kBlockBytes = kFive ? 176 : 144, kBlockElems = kQK_K, kChunks = 8;
  static constexpr int kQs = kFive ? 48 : 16;
  struct Chunk {
    int lo[4], hi[4];  // the quants of sub-blocks 2p and 2p + 1
    int sc_lo, m_lo, sc_hi, m_hi;
    float d, dmin;
  };
  static __device__ __forceinline__ Chunk load(const uint8_t* w, int c) {
    const int p = c / 2, h = c % 2;
    Chunk k;
    int v[4];
    load16_a4(w + kQs + 32 * p + 16 * h, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      k.lo[j] = v[j] & 0x0F0F0F0F;
      k.hi[j] = (v[j] >> 4) & 0x0F0F0F0F;
    }
    if constexpr (kFive) {
      int qh[4];
      load16_a4(w + 16 + 16 * h, qh);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        k.lo[j] |= ((qh[j] >> (2 * p)) & 0x01010101) << 4;
        k.hi[j] |= ((qh[j] >> (2 * p + 1)) & 0x01010101) << 4;
      }
    }
    scale_min_k4(2 * p, w + 4, &k.sc_lo, &k.m_lo);
    scale_min_k4(2 * p + 1, w + 4, &k.sc_hi, &k.m_hi);
    k.d = half_bits_to_float(load_u16(w));
    k.dmin = half_bits_to_float(load_u16(w + 2));
    return k;
  }
  static __device__ __forceinline__ float dot(const uint8_t* w, const ActQ8& act, int b, int c) {
    const int p = c / 2, h = c % 2;
    int v[4];
    load16_a4(w + kQs + 32 * p + 16 * h, v);
    int lo[4], hi[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      lo[k] = v[k] & 0x0F0F0F0F;
      hi[k] = (v[k] >> 4) & 0x0F0F0F0F;
    }
    if constexpr (kFive) {
      int qh[4];
      load16_a4(w + 16 + 16 * h, qh);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        lo[k] |= ((qh[k] >> (2 * p)) & 0x01010101) << 4;
        hi[k] |= ((qh[k] >> (2 * p + 1)) & 0x01010101) << 4;
      }
    }
    const int8_t* xq = act.q + b * kQK_K + 64 * p + 16 * h;
    const Dot16 rl = dot16(lo, xq), rh = dot16(hi, xq + 32);
    int sc_lo, m_lo, sc_hi, m_hi;
    scale_min_k4(2 * p, w + 4, &sc_lo, &m_lo);
    scale_min_k4(2 * p + 1, w + 4, &sc_hi, &m_hi);
    const int isum = sc_lo * rl.sumi + sc_hi * rh.sumi;
    const int summs = m_lo * rl.sx + m_hi * rh.sx;
    return scale_and_min(act.d[b], half_bits_to_float(load_u16(w)),
                         half_bits_to_float(load_u16(w + 2)), isum, summs);
  }
  static __device__ __forceinline__ float dot(const Chunk& k, const ActQ8& act, int b, int c) {
    const int p = c / 2, h = c % 2;
    const int8_t* xq = act.q + b * kQK_K + 64 * p + 16 * h;
    const Dot16 rl = dot16(k.lo, xq), rh = dot16(k.hi, xq + 32);
    const int isum = k.sc_lo * rl.sumi + k.sc_hi * rh.sumi;
    const int summs = k.m_lo * rl.sx + k.m_hi * rh.sx;
    return scale_and_min(act.d[b], k.d, k.dmin, isum, summs);
  }

  // The tensor-core form (matvec_impl.cuh): halves = sub-blocks 2p (low nibbles) and 2p + 1.
  // A warp's chunks q4 and q4 + 4 share the block's first 16 bytes (d, dmin and the packed
  // scales: one load) and, for Q5_K, the high-bit word of half q4 % 2.
  struct MmaRaw {
    int4 head;
    int v[2], qh;
  };
  struct MmaScale {
    int sc_lo, m_lo, sc_hi, m_hi;
    float d, dmin;
  };
  static constexpr int kMmaHi = 32;
  static constexpr bool kMmaSums = true;
  static __device__ __forceinline__ int mma_act(int c) {
    return 64 * (c / 2) + 16 * (c % 2);
  }
  static __device__ __forceinline__ MmaRaw mma_fetch(const uint8_t* w, int q4, int t) {
    MmaRaw r;
    r.head = *reinterpret_cast<const int4*>(w);  // blocks of 144 / 176 bytes: 16-byte aligned
#pragma unroll
    for (int s = 0; s < 2; ++s) r.v[s] = load_int_a4(w + kQs + 16 * (q4 + 4 * s) + 4 * t);
    r.qh = kFive ? load_int_a4(w + 16 + 16 * (q4 % 2) + 4 * t) : 0;
    return r;
  }
  static __device__ __forceinline__ MmaQuants mma_quants(const MmaRaw& r, int q4, int s) {
    const int v = r.v[s], p = (q4 + 4 * s) / 2;
    MmaQuants q{static_cast<uint32_t>(v & 0x0F0F0F0F),
                static_cast<uint32_t>((v >> 4) & 0x0F0F0F0F)};
    if constexpr (kFive) {
      q.lo |= ((r.qh >> (2 * p)) & 0x01010101) << 4;
      q.hi |= ((r.qh >> (2 * p + 1)) & 0x01010101) << 4;
    }
    return q;
  }
  // scale_min_k4 of sub-blocks 2p and 2p + 1 from the head's words: for sub-block j, byte
  // j % 4 of the three scale words (j < 4: 6-bit scale and min; else 4 low bits from the
  // third word, 2 high bits from the first two).
  static __device__ __forceinline__ MmaScale mma_scale(const MmaRaw& r, const uint8_t*, int q4,
                                                       int s) {
    MmaScale m;
    const int i0 = (q4 / 2) * 2;  // j % 4 of sub-block 2p
    int sc[2], mn[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int sh = 8 * (i0 + h);
      const int b0 = (r.head.y >> sh) & 0xFF, b1 = (r.head.z >> sh) & 0xFF;
      if (s == 0) {
        sc[h] = b0 & 63;
        mn[h] = b1 & 63;
      } else {
        const int b2 = (r.head.w >> sh) & 0xFF;
        sc[h] = (b2 & 0xF) | ((b0 >> 6) << 4);
        mn[h] = (b2 >> 4) | ((b1 >> 6) << 4);
      }
    }
    m.sc_lo = sc[0], m.m_lo = mn[0], m.sc_hi = sc[1], m.m_hi = mn[1];
    m.d = half_bits_to_float(static_cast<uint16_t>(r.head.x & 0xFFFF));
    m.dmin = half_bits_to_float(static_cast<uint16_t>(static_cast<uint32_t>(r.head.x) >> 16));
    return m;
  }
  static __device__ __forceinline__ float mma_value(const MmaScale& s, float dx, int lo, int hi,
                                                    int sx_lo, int sx_hi) {
    return scale_and_min(dx, s.d, s.dmin, s.sc_lo * lo + s.sc_hi * hi,
                         s.m_lo * sx_lo + s.m_hi * sx_hi);
  }
};

struct Q6_K {
  static constexpr int kBlockBytes = 210, kBlockElems = kQK_K, kChunks = 8;
  struct Chunk {
    int lo[4], hi[4];  // 6-bit quants of two sub-blocks (unsigned, offset 32)
    int sc0, sc1;
    float d;
  };
  static __device__ __forceinline__ Chunk load(const uint8_t* w, int c) {
    const int c2 = c / 4, mq = c % 4;
    int ql[4], qh[4];
    load16_a2(w + c2 * 64 + 16 * mq, ql);
    load16_a2(w + 128 + c2 * 32 + 16 * (mq % 2), qh);
    const int s0 = mq / 2, s1 = 2 + mq / 2;
    Chunk k;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      k.lo[j] = (ql[j] & 0x0F0F0F0F) | (((qh[j] >> (2 * s0)) & 0x03030303) << 4);
      k.hi[j] = ((ql[j] >> 4) & 0x0F0F0F0F) | (((qh[j] >> (2 * s1)) & 0x03030303) << 4);
    }
    const auto* scales = reinterpret_cast<const int8_t*>(w + 192);
    k.sc0 = scales[c2 * 8 + mq];
    k.sc1 = scales[c2 * 8 + 4 + mq];
    k.d = half_bits_to_float(load_u16(w + 208));
    return k;
  }
  static __device__ __forceinline__ float dot(const uint8_t* w, const ActQ8& act, int b, int c) {
    const int c2 = c / 4, mq = c % 4;
    int ql[4], qh[4];
    load16_a2(w + c2 * 64 + 16 * mq, ql);
    load16_a2(w + 128 + c2 * 32 + 16 * (mq % 2), qh);
    const int s0 = mq / 2, s1 = 2 + mq / 2;
    int lo[4], hi[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      lo[k] = (ql[k] & 0x0F0F0F0F) | (((qh[k] >> (2 * s0)) & 0x03030303) << 4);
      hi[k] = ((ql[k] >> 4) & 0x0F0F0F0F) | (((qh[k] >> (2 * s1)) & 0x03030303) << 4);
    }
    const int8_t* xq = act.q + b * kQK_K + c2 * 128 + 16 * mq;
    const Dot16 r0 = dot16(lo, xq), r1 = dot16(hi, xq + 64);
    const auto* scales = reinterpret_cast<const int8_t*>(w + 192);
    const int isum = scales[c2 * 8 + mq] * (r0.sumi - 32 * r0.sx) +
                     scales[c2 * 8 + 4 + mq] * (r1.sumi - 32 * r1.sx);
    return act.d[b] * half_bits_to_float(load_u16(w + 208)) * static_cast<float>(isum);
  }
  static __device__ __forceinline__ float dot(const Chunk& k, const ActQ8& act, int b, int c) {
    const int c2 = c / 4, mq = c % 4;
    const int8_t* xq = act.q + b * kQK_K + c2 * 128 + 16 * mq;
    const Dot16 r0 = dot16(k.lo, xq), r1 = dot16(k.hi, xq + 64);
    const int isum = k.sc0 * (r0.sumi - 32 * r0.sx) + k.sc1 * (r1.sumi - 32 * r1.sx);
    return act.d[b] * k.d * static_cast<float>(isum);
  }

  // The tensor-core form (matvec_impl.cuh): the quants less 32 as int8, so a half's dot is
  // dot16's sumi - 32 * sx exactly and needs no activation sums. A warp's chunks q4 and
  // q4 + 4 are chunk q4 of the two 128-element halves of the block.
  struct MmaRaw {
    int ql[2], qh[2];
  };
  struct MmaScale {
    int sc0, sc1;
    float d;
  };
  static constexpr int kMmaHi = 64;
  static constexpr bool kMmaSums = false;
  static __device__ __forceinline__ int mma_act(int c) {
    return 128 * (c / 4) + 16 * (c % 4);
  }
  static __device__ __forceinline__ MmaRaw mma_fetch(const uint8_t* w, int q4, int t) {
    MmaRaw r;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      r.ql[s] = load_int_a2(w + s * 64 + 16 * q4 + 4 * t);
      r.qh[s] = load_int_a2(w + 128 + s * 32 + 16 * (q4 % 2) + 4 * t);
    }
    return r;
  }
  static __device__ __forceinline__ MmaQuants mma_quants(const MmaRaw& r, int q4, int s) {
    const int ql = r.ql[s], qh = r.qh[s];
    const int s0 = q4 / 2, s1 = 2 + q4 / 2;
    const int lo = (ql & 0x0F0F0F0F) | (((qh >> (2 * s0)) & 0x03030303) << 4);
    const int hi = ((ql >> 4) & 0x0F0F0F0F) | (((qh >> (2 * s1)) & 0x03030303) << 4);
    return {__vsub4(static_cast<uint32_t>(lo), 0x20202020u),
            __vsub4(static_cast<uint32_t>(hi), 0x20202020u)};
  }
  static __device__ __forceinline__ MmaScale mma_scale(const MmaRaw&, const uint8_t* w, int q4,
                                                       int s) {
    const auto* scales = reinterpret_cast<const int8_t*>(w + 192);
    return {scales[s * 8 + q4], scales[s * 8 + 4 + q4], half_bits_to_float(load_u16(w + 208))};
  }
  static __device__ __forceinline__ float mma_value(const MmaScale& s, float dx, int lo, int hi,
                                                    int, int) {
    return dx * s.d * static_cast<float>(s.sc0 * lo + s.sc1 * hi);
  }
};

}  // namespace

bool launch_matvec_kquant(uint32_t type_id, const MatvecArgs& a) {
  switch (type_id) {
    case 10:
      launch_matvec<Q2_K>(a);
      return true;
    case 11:
      launch_matvec<Q3_K>(a);
      return true;
    case 12:
      launch_matvec<K4<false>>(a);
      return true;
    case 13:
      launch_matvec<K4<true>>(a);
      return true;
    case 14:
      launch_matvec<Q6_K>(a);
      return true;
    default:
      return false;
  }
}

}  // namespace hypura::compute::cuda
