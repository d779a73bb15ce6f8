// Non-x86 builds: no SIMD tables (cpu_supports() reports only the scalar level, so these
// are never called).
#include "compute/cpu/kernels.h"

namespace hypura::compute {

void fill_avx2_kernels(KernelTable*) {}
void fill_avx512_kernels(KernelTable*) {}
void fill_avx512vnni_kernels(KernelTable*) {}
void fill_amx_kernels(KernelTable*) {}
void fill_avx2_attention(KernelTable*) {}
void fill_avx512_attention(KernelTable*) {}

}  // namespace hypura::compute
