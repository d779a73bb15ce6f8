// Matrix-vector products of F32, F16 and BF16 weights with float activations: eight
// elements per chunk (one 16-byte load of F16/BF16, two of F32) when the row allows,
// else one element per chunk.
#include "compute/cuda/matvec_impl.cuh"

namespace hypura::compute::cuda {
namespace {

enum class FloatFmt { kF32, kF16, kBF16 };

template <FloatFmt kFmt>
__device__ __forceinline__ float widen(uint16_t h) {
  return kFmt == FloatFmt::kF16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
}

template <FloatFmt kFmt>
struct Float8 {
  static constexpr int kElemBytes = kFmt == FloatFmt::kF32 ? 4 : 2;
  static constexpr int kBlockElems = 8, kBlockBytes = 8 * kElemBytes, kChunks = 1;
  struct Chunk {
    float w[8];
  };
  static __device__ __forceinline__ Chunk load(const uint8_t* w, int) {
    Chunk k;
    if constexpr (kFmt == FloatFmt::kF32) {
      const float4* wf = reinterpret_cast<const float4*>(w);
      const float4 w0 = wf[0], w1 = wf[1];
      k.w[0] = w0.x, k.w[1] = w0.y, k.w[2] = w0.z, k.w[3] = w0.w;
      k.w[4] = w1.x, k.w[5] = w1.y, k.w[6] = w1.z, k.w[7] = w1.w;
    } else {
      const uint4 raw = *reinterpret_cast<const uint4*>(w);
      const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        k.w[2 * j] = widen<kFmt>(static_cast<uint16_t>(r[j] & 0xffff));
        k.w[2 * j + 1] = widen<kFmt>(static_cast<uint16_t>(r[j] >> 16));
      }
    }
    return k;
  }
  static __device__ __forceinline__ float dot(const uint8_t* w, const ActQ8& act, int b, int) {
    const float4* xv = reinterpret_cast<const float4*>(act.x + b * 8);
    const float4 x0 = xv[0], x1 = xv[1];
    float wv[8];
    if constexpr (kFmt == FloatFmt::kF32) {
      const float4* wf = reinterpret_cast<const float4*>(w);
      const float4 w0 = wf[0], w1 = wf[1];
      wv[0] = w0.x, wv[1] = w0.y, wv[2] = w0.z, wv[3] = w0.w;
      wv[4] = w1.x, wv[5] = w1.y, wv[6] = w1.z, wv[7] = w1.w;
    } else {
      const uint4 raw = *reinterpret_cast<const uint4*>(w);
      const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        wv[2 * k] = widen<kFmt>(static_cast<uint16_t>(r[k] & 0xffff));
        wv[2 * k + 1] = widen<kFmt>(static_cast<uint16_t>(r[k] >> 16));
      }
    }
    return wv[0] * x0.x + wv[1] * x0.y + wv[2] * x0.z + wv[3] * x0.w + wv[4] * x1.x + wv[5] * x1.y +
           wv[6] * x1.z + wv[7] * x1.w;
  }
  static __device__ __forceinline__ float dot(const Chunk& k, const ActQ8& act, int b, int) {
    const float4* xv = reinterpret_cast<const float4*>(act.x + b * 8);
    const float4 x0 = xv[0], x1 = xv[1];
    return k.w[0] * x0.x + k.w[1] * x0.y + k.w[2] * x0.z + k.w[3] * x0.w + k.w[4] * x1.x +
           k.w[5] * x1.y + k.w[6] * x1.z + k.w[7] * x1.w;
  }
};

template <FloatFmt kFmt>
struct Float1 {
  static constexpr int kElemBytes = kFmt == FloatFmt::kF32 ? 4 : 2;
  static constexpr int kBlockElems = 1, kBlockBytes = kElemBytes, kChunks = 1;
  struct Chunk {
    float w;
  };
  static __device__ __forceinline__ Chunk load(const uint8_t* w, int) {
    if constexpr (kFmt == FloatFmt::kF32) {
      return {*reinterpret_cast<const float*>(w)};
    } else {
      return {widen<kFmt>(load_u16(w))};
    }
  }
  static __device__ __forceinline__ float dot(const uint8_t* w, const ActQ8& act, int b, int) {
    if constexpr (kFmt == FloatFmt::kF32) {
      return *reinterpret_cast<const float*>(w) * act.x[b];
    } else {
      return widen<kFmt>(load_u16(w)) * act.x[b];
    }
  }
  static __device__ __forceinline__ float dot(const Chunk& k, const ActQ8& act, int b, int) {
    return k.w * act.x[b];
  }
};

template <FloatFmt kFmt>
void launch_float(const MatvecArgs& a) {
  const bool wide = a.n_cols % 8 == 0 && a.row_bytes % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(a.w) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(a.act.x) % 16 == 0;
  if (wide) {
    launch_matvec<Float8<kFmt>>(a);
  } else {
    launch_matvec<Float1<kFmt>>(a);
  }
}

}  // namespace

int g_matvec_config_override = -1;
int g_matvec_mma_min_tokens = 4;
int g_matvec_mma_prefetch = 1;
int g_matvec_mma_min_pairs = 3;

bool launch_matvec_float(uint32_t type_id, const MatvecArgs& a) {
  switch (type_id) {
    case 0:
      launch_float<FloatFmt::kF32>(a);
      return true;  // F32
    case 1:
      launch_float<FloatFmt::kF16>(a);
      return true;  // F16
    case 30:
      launch_float<FloatFmt::kBF16>(a);
      return true;  // BF16
    default:
      return false;
  }
}

}  // namespace hypura::compute::cuda
