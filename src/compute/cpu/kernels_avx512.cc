// AVX-512 kernels without VNNI (built with -mavx512f/bw/vl/dq; see kernels_avx512_impl.h).
#include "compute/cpu/kernels_avx512_impl.h"

namespace hypura::compute {

void fill_avx512_kernels(KernelTable* table) {
  fill_avx512_table(table);
}

}  // namespace hypura::compute
