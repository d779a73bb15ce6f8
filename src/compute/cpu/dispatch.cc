// Picks the kernel table once from CPUID (and HYPURA_SIMD), and builds each table by
// starting from the scalar one and letting the ISA file overwrite what it accelerates.
#include <cstdlib>
#include <cstring>

#include "compute/cpu/kernels.h"

namespace hypura::compute {

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
  }
  return "?";
}

SimdLevel default_simd_level() {
  SimdLevel want = SimdLevel::kAvx512Vnni;
  if (const char* env = std::getenv("HYPURA_SIMD")) {
    for (int l = 0; l <= 3; ++l) {
      if (std::strcmp(env, simd_level_name(static_cast<SimdLevel>(l))) == 0) {
        want = static_cast<SimdLevel>(l);
      }
    }
  }
  int l = static_cast<int>(want);
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
