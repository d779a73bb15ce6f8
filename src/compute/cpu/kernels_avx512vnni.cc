// AVX-512 kernels with VNNI (built with -mavx512vnni on top; see kernels_avx512_impl.h).
#include "compute/cpu/kernels_avx512_impl.h"

namespace hypura::compute {

void fill_avx512vnni_kernels(KernelTable* table) {
  fill_avx512_table(table);
}

}  // namespace hypura::compute
