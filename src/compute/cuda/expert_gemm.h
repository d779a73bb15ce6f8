// Internal: a prompt's MoE products in one launch per weight tensor (gemm.cc's
// matmul_experts). Each block multiplies a tile of one expert's weight rows, widened to F16
// on the fly by the block formats of dequant_formats.cuh (the values dequantize_rows_f16
// writes), with up to kExpertTileRows of that expert's grouped activation rows (F16), on
// the tensor cores with F32 accumulation. So it computes what dequantizing every expert and
// one cuBLAS product per expert did, in another summation order, without the F16 copy of
// the weights and without a launch per expert. MXFP4, Q8_0 and Q4_0 experts take the
// activations as 8-bit quants instead: int8 products of whole blocks, scaled as the CPU
// scales them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

inline constexpr int kExpertTileRows = 64;   // activation rows of a tile
inline constexpr int kMaxExpertTiles = 256;  // tiles of one launch (its parameters hold them)

// Tile i: grouped activation rows first[i] .. first[i] + rows[i] (rows[i] <= kExpertTileRows),
// all routed to expert[i]. Passed by value (1.8 KB of kernel parameters).
struct ExpertTiles {
  int count = 0;
  int32_t first[kMaxExpertTiles];
  uint16_t expert[kMaxExpertTiles];
  uint8_t rows[kMaxExpertTiles];
};

struct ExpertGemmArgs {
  const void* w = nullptr;  // expert 0's (n_rows, n_cols) matrix; expert e at e * expert_bytes
  size_t expert_bytes = 0, row_bytes = 0;
  int64_t n_rows = 0, n_cols = 0;
  const uint16_t* x = nullptr;  // grouped rows of n_cols F16 values
  // Or, for the formats expert_gemm_takes_q8 names, the rows as Q8_0 activations (act_q8.h's
  // planar quants and scales, n_cols / 32 scales a row).
  const int8_t* xq = nullptr;
  const float* xd = nullptr;
  float* y = nullptr;  // grouped rows of n_rows values
  StreamHandle stream = nullptr;
};

// Whether the kernel takes weights of GGUF type id type_id with n_cols columns: every block
// format, F16 and BF16, rows of a multiple of 8 columns.
bool expert_gemm_supported(uint32_t type_id, int64_t n_cols);
// Whether type_id's experts take 8-bit activations (MXFP4, Q8_0, Q4_0; n_cols % 32 == 0):
// exact integer block products, scaled as the CPU scales them.
bool expert_gemm_takes_q8(uint32_t type_id, int64_t n_cols);
// y's rows of the tiles = their expert's matrix . x's rows (xq / xd where set). REQUIRES:
// supported, tiles.count > 0, every row index and n_rows * n_cols within int32.
void launch_expert_gemm(uint32_t type_id, const ExpertGemmArgs& a, const ExpertTiles& tiles);

}  // namespace hypura::compute::cuda
