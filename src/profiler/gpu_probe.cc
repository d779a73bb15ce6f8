// The CUDA driver API by dlopen: no CUDA headers at build time, so the few entry points
// used are declared here with the driver's C signatures (cuda.h, API version >= 3020).
#include "profiler/gpu_probe.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace hypura::profiler {
namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;

struct CudaApi {
  void* lib = nullptr;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemGetInfo)(size_t*, size_t*);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemAllocHost)(void**, size_t);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);

  ~CudaApi() {
    if (lib) dlclose(lib);
  }

  // Loads every entry point; false (with `why`) when the library or a symbol is missing.
  bool load(std::string& why) {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      why = "no CUDA driver (libcuda.so.1 not found)";
      return false;
    }
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) {
        why = std::string("libcuda lacks ") + name;
        ok = false;
      }
    };
    sym(cuInit, "cuInit");
    sym(cuDeviceGetCount, "cuDeviceGetCount");
    sym(cuDeviceGet, "cuDeviceGet");
    sym(cuDeviceGetName, "cuDeviceGetName");
    sym(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
    sym(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    sym(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    sym(cuCtxSetCurrent, "cuCtxSetCurrent");
    sym(cuCtxSynchronize, "cuCtxSynchronize");
    sym(cuMemGetInfo, "cuMemGetInfo_v2");
    sym(cuMemAlloc, "cuMemAlloc_v2");
    sym(cuMemFree, "cuMemFree_v2");
    sym(cuMemAllocHost, "cuMemAllocHost_v2");
    sym(cuMemFreeHost, "cuMemFreeHost");
    sym(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    sym(cuMemcpyDtoD, "cuMemcpyDtoD_v2");
    return ok;
  }
};

// Best bytes/s over a few repetitions of `copy` (which must be synchronous or synced).
template <typename Fn>
double best_rate(size_t bytes, Fn copy) {
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    if (!copy()) return 0;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0 && s > 0) best = std::max(best, static_cast<double>(bytes) / s);  // rep 0 warms up
  }
  return best;
}

void measure_bandwidths(CudaApi& cu, GpuProfile& g, size_t bytes) {
  CUdeviceptr dev = 0, dev2 = 0;
  if (cu.cuMemAlloc(&dev, bytes) != 0) return;
  std::vector<uint8_t> pageable(bytes, 1);
  g.h2d_pageable_bps = best_rate(bytes, [&] {
    return cu.cuMemcpyHtoD(dev, pageable.data(), bytes) == 0 && cu.cuCtxSynchronize() == 0;
  });
  void* pinned = nullptr;
  if (cu.cuMemAllocHost(&pinned, bytes) == 0) {
    std::memset(pinned, 1, bytes);
    g.h2d_pinned_bps = best_rate(bytes, [&] {
      return cu.cuMemcpyHtoD(dev, pinned, bytes) == 0 && cu.cuCtxSynchronize() == 0;
    });
    cu.cuMemFreeHost(pinned);
  }
  if (cu.cuMemAlloc(&dev2, bytes) == 0) {
    // A device copy reads and writes `bytes`: 2 x bytes of memory traffic.
    g.memory_bandwidth_bps = best_rate(2 * bytes, [&] {
      return cu.cuMemcpyDtoD(dev2, dev, bytes) == 0 && cu.cuCtxSynchronize() == 0;
    });
    cu.cuMemFree(dev2);
  }
  cu.cuMemFree(dev);
}

}  // namespace

GpuProbeResult probe_gpus(size_t copy_bytes) {
  GpuProbeResult out;
  CudaApi cu;
  if (!cu.load(out.note)) return out;
  int count = 0;
  if (cu.cuInit(0) != 0 || cu.cuDeviceGetCount(&count) != 0 || count == 0) {
    out.note = "CUDA driver present but no usable device";
    return out;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    CUcontext ctx;
    if (cu.cuDeviceGet(&dev, i) != 0 || cu.cuDevicePrimaryCtxRetain(&ctx, dev) != 0) continue;
    cu.cuCtxSetCurrent(ctx);
    GpuProfile g;
    char name[256] = {};
    cu.cuDeviceGetName(name, sizeof name - 1, dev);
    g.name = name;
    size_t total = 0, free_b = 0;
    cu.cuDeviceTotalMem(&total, dev);
    cu.cuMemGetInfo(&free_b, &total);
    g.total_bytes = total;
    g.free_bytes = free_b;
    measure_bandwidths(cu, g, std::min(copy_bytes, free_b / 4));
    cu.cuCtxSetCurrent(nullptr);
    cu.cuDevicePrimaryCtxRelease(dev);
    out.gpus.push_back(g);
  }
  return out;
}

}  // namespace hypura::profiler
