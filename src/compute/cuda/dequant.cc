// dequant.h's entry points: WeightView to the launcher's plain arguments.
#include "compute/cuda/dequant.h"

#include <cassert>

#include "compute/cuda/dequant_launch.h"

namespace hypura::compute::cuda {
namespace {

void run(const WeightView& w, const int32_t* ids, int64_t row0, int64_t n_rows, void* out, bool f16,
         StreamHandle stream) {
  DequantArgs a;
  a.w = w.data;
  a.row_bytes = w.row_bytes();
  a.n_cols = w.n_cols;
  a.ids = ids;
  a.row0 = row0;
  a.n_rows = n_rows;
  a.out = out;
  a.f16 = f16;
  a.stream = stream;
  const bool launched = launch_dequant(static_cast<uint32_t>(w.type), a);
  assert(launched);
  (void)launched;
}

}  // namespace

void dequantize_rows_f16(const WeightView& w, int64_t row0, int64_t n_rows, uint16_t* out,
                         StreamHandle stream) {
  run(w, nullptr, row0, n_rows, out, true, stream);
}

void get_rows_f32(const WeightView& w, const int32_t* ids, int64_t n_ids, float* out,
                  StreamHandle stream) {
  run(w, ids, 0, n_ids, out, false, stream);
}

void f32_to_f16(const float* x, int64_t n, uint16_t* out, StreamHandle stream) {
  launch_f32_to_f16(x, n, out, stream);
}

}  // namespace hypura::compute::cuda
