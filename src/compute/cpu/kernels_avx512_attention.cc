// The attention step with AVX-512 (built with the AVX-512 flags; see attention_impl.h).
#include "compute/cpu/attention_impl.h"
#include "compute/cpu/kernels.h"

namespace hypura::compute {

void fill_avx512_attention(KernelTable* table) {
  table->widen_rows = widen_rows_simd;
  table->widen_keys = widen_keys_simd;
  table->attention_step = attention_step_simd;
}

}  // namespace hypura::compute
