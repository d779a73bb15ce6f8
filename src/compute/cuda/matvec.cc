// matvec(): quantizes the activations to the weight type's activation format, then runs
// the kernel of the weight's format family (matvec_float.cu, matvec_legacy.cu,
// matvec_kquant.cu).
#include "compute/cuda/matvec.h"

#include <cassert>

#include "compute/cuda/matvec_launch.h"
#include "compute/cuda/quantize.h"
#include "quant/quant.h"

namespace hypura::compute::cuda {

bool matvec_supported(gguf::GgmlType type) {
  using T = gguf::GgmlType;
  switch (type) {
    case T::F32: case T::F16: case T::BF16: case T::Q4_0: case T::Q4_1: case T::Q5_0:
    case T::Q5_1: case T::Q8_0: case T::Q2_K: case T::Q3_K: case T::Q4_K: case T::Q5_K:
    case T::Q6_K:
      return true;
    default:
      return false;
  }
}

size_t matvec_scratch_bytes(int64_t n_cols) {
  return act_q8_layout(n_cols).total;
}

ActQ8 quantize_for(gguf::GgmlType type, const float* x, int64_t n_cols, void* scratch,
                   StreamHandle stream) {
  switch (quant::activation_type(type)) {
    case gguf::GgmlType::Q8_0: return quantize_act(ActFormat::kQ8_0, x, n_cols, scratch, stream);
    case gguf::GgmlType::Q8_1: return quantize_act(ActFormat::kQ8_1, x, n_cols, scratch, stream);
    case gguf::GgmlType::Q8_K: return quantize_act(ActFormat::kQ8_K, x, n_cols, scratch, stream);
    default: {
      ActQ8 act;
      act.x = x;
      return act;
    }
  }
}

void matvec_quantized(const WeightView& w, const ActQ8& act, float* y, StreamHandle stream) {
  assert(matvec_supported(w.type));
  assert(w.n_cols % quant::block_size(w.type) == 0);
  MatvecArgs a;
  a.w = w.data;
  a.row_bytes = w.row_bytes();
  a.n_cols = w.n_cols;
  a.n_rows = w.n_rows;
  a.act = act;
  a.y = y;
  a.stream = stream;
  const auto id = static_cast<uint32_t>(w.type);
  const bool launched = launch_matvec_kquant(id, a) || launch_matvec_legacy(id, a) ||
                        launch_matvec_float(id, a);
  assert(launched);
  (void)launched;
}

void matvec(const WeightView& w, const float* x, float* y, void* scratch, StreamHandle stream) {
  matvec_quantized(w, quantize_for(w.type, x, w.n_cols, scratch, stream), y, stream);
}

}  // namespace hypura::compute::cuda
