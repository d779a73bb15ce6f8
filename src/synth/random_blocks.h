// Deterministic pseudo-random tensor bytes that decode to a chosen distribution.
//
// For quantized types the quants are uniform random and the block scales are set so the
// dequantized values have mean ~0 and the requested standard deviation: valid blocks of
// every format, produced without a quantizer (bytes per second bounded by the PRNG, far
// above disk speed). F16/F32 values are drawn from a uniform distribution with the
// requested mean and std.
//
// Determinism: a tensor is cut into fixed "units" (one quant block, or 128 elements for
// F16/F32) and unit u's bytes depend only on (seed, u). Any byte range can therefore be
// produced on its own, so the output does not depend on how a writer chunks the tensor.
//
// Thread-safety: a TensorBytes is immutable after construction; fill() is const.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "gguf/gguf.h"

namespace hypura::synth {

// Target distribution of a tensor's dequantized values.
struct ValueSpec {
  float mean = 0.0f;  // quantized types support mean 0 only (weights)
  float std = 0.0f;
};

// True for the types TensorBytes can generate: F32, F16, Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K,
// MXFP4.
bool can_generate(gguf::GgmlType type);

class TensorBytes {
 public:
  // REQUIRES: can_generate(type); values.mean == 0 unless type is F16 or F32.
  TensorBytes(gguf::GgmlType type, ValueSpec values, uint64_t seed);

  // Writes bytes [offset, offset + out.size()) of the tensor's data into out.
  void fill(uint64_t offset, std::span<uint8_t> out) const;

  uint64_t unit_bytes() const { return unit_bytes_; }

 private:
  static constexpr int kFloatUnit = 128;  // elements per F16/F32 unit

  void make_unit(uint64_t unit, uint8_t* dst) const;  // writes unit_bytes_ bytes

  gguf::GgmlType type_;
  ValueSpec values_;
  uint64_t seed_;
  uint64_t unit_bytes_;
  float d_base_ = 0.0f;                    // quant types: the block scale before per-block jitter
  int mxfp4_e0_ = 0;                       // MXFP4: the smaller of the two block exponents
  float mxfp4_p_up_ = 0.0f;                // MXFP4: the probability of the larger one
  std::array<uint16_t, 256> f16_table_{};  // F16: value for each random byte
  std::array<float, 256> f32_table_{};     // F32: value for each random byte
};

// Mixes a seed with a tensor name into the tensor's seed (FNV-1a + splitmix finalizer).
uint64_t tensor_seed(uint64_t seed, std::string_view name);

}  // namespace hypura::synth
