// Internal: the launcher behind dequant.h (dequant.cc dispatches with the GGUF type id,
// so dequant.cu, built as C++17, needs no C++20 header).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

struct DequantArgs {
  const void* w = nullptr;  // rows of row_bytes
  size_t row_bytes = 0;
  int64_t n_cols = 0;
  const int32_t* ids = nullptr;  // (n_rows) source rows, or null: rows row0 ..
  int64_t row0 = 0, n_rows = 0;
  void* out = nullptr;  // (n_rows, n_cols) F16 or F32
  bool f16 = true;
  StreamHandle stream = nullptr;
};

// False for a type id it does not know.
bool launch_dequant(uint32_t type_id, const DequantArgs& a);
void launch_f32_to_f16(const float* x, int64_t n, uint16_t* out, StreamHandle stream);

}  // namespace hypura::compute::cuda
