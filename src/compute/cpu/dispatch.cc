// Picks the kernel table once from CPUID (or a level asked for), and builds each table by
// starting from the scalar one and letting the ISA file overwrite what it accelerates.
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "compute/cpu/kernels.h"

namespace hypura::compute {
namespace {

// AMX-TILE and AMX-INT8 in CPUID, and the kernel's grant of the tile state to this process
// (Linux hands the 8 KiB tile registers out only on request: arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; it fails where the kernel or a VM lacks it).
bool amx_usable() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = (edx >> 24) & 1, int8 = (edx >> 25) & 1;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return tile && int8 && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
#else
  return false;
#endif
}

}  // namespace

bool cpu_supports(SimdLevel level) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (level) {
    case SimdLevel::kScalar:
      return true;
    case SimdLevel::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case SimdLevel::kAvx512:
      return cpu_supports(SimdLevel::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
    case SimdLevel::kAvx512Vnni:
      return cpu_supports(SimdLevel::kAvx512) && __builtin_cpu_supports("avx512vnni");
    case SimdLevel::kAmx:
      return cpu_supports(SimdLevel::kAvx512Vnni) && amx_usable();
  }
#endif
  return level == SimdLevel::kScalar;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx512Vnni:
      return "avx512vnni";
    case SimdLevel::kAmx:
      return "amx";
  }
  return "?";
}

SimdLevel default_simd_level() {
  int l = static_cast<int>(SimdLevel::kAmx);
  while (l > 0 && !cpu_supports(static_cast<SimdLevel>(l))) --l;
  return static_cast<SimdLevel>(l);
}

namespace {

KernelTable make_table(SimdLevel level) {
  KernelTable t = scalar_kernels();
  t.level = level;
  t.name = simd_level_name(level);
  switch (level) {
    case SimdLevel::kScalar:
      break;
    case SimdLevel::kAvx2:
      fill_avx2_kernels(&t);
      break;
    case SimdLevel::kAvx512:
      fill_avx512_kernels(&t);
      break;
    case SimdLevel::kAvx512Vnni:
      fill_avx512vnni_kernels(&t);
      break;
    case SimdLevel::kAmx:
      fill_amx_kernels(&t);
      break;
  }
  if (level != SimdLevel::kScalar) fill_avx2_attention(&t);  // every level from AVX2 up
  if (level >= SimdLevel::kAvx512) fill_avx512_attention(&t);
  return t;
}

}  // namespace

const KernelTable* kernel_table(SimdLevel level) {
  if (!cpu_supports(level)) return nullptr;
  // Built only for supported levels: the fill functions are compiled with ISA flags and
  // may themselves use those instructions.
  switch (level) {
    case SimdLevel::kScalar:
      return &scalar_kernels();
    case SimdLevel::kAvx2: {
      static const KernelTable t = make_table(level);
      return &t;
    }
    case SimdLevel::kAvx512: {
      static const KernelTable t = make_table(level);
      return &t;
    }
    case SimdLevel::kAvx512Vnni: {
      static const KernelTable t = make_table(level);
      return &t;
    }
    case SimdLevel::kAmx: {
      static const KernelTable t = make_table(level);
      return &t;
    }
  }
  return nullptr;
}

TileFn tile_fn(const KernelTable& table, gguf::GgmlType type) {
  const int id = static_cast<int>(type);
  if (id < 0 || id >= kMaxTypeId) return nullptr;
  return table.tile[id] ? table.tile[id] : scalar_kernels().tile[id];
}

QuantizeActFn quantize_act_fn(const KernelTable& table, gguf::GgmlType type) {
  const int id = static_cast<int>(type);
  if (id < 0 || id >= kMaxTypeId || !table.tile[id]) return nullptr;
  return table.quantize_act[id];
}

}  // namespace hypura::compute
