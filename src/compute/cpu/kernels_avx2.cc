// avx2 kernels (compiled with their own -m flags; see src/compute/CMakeLists.txt).
#include "compute/cpu/kernels.h"

namespace hypura::compute {

void fill_avx2_kernels(KernelTable* table) { (void)table; }

}  // namespace hypura::compute
