// CUDA device access: device queries, device memory and streams.
//
// This header needs no CUDA headers, so host code that never launches a kernel (the
// planner, the CLI) can include it. Memory is taken with cudaMalloc only (never managed
// memory), and a failed allocation is a Status (kResourceExhausted), never a crash: the
// planner may then spill to RAM. Asynchronous errors of launched work surface at the next
// Stream::synchronize().
//
// Thread-safety: a DeviceBuffer or Stream is owned by one caller; the free functions may be
// called from any thread (they act on the calling thread's current device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace hypura::compute::cuda {

using StreamHandle = CUstream_st*;  // nullptr: the legacy default stream

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  int n_sm = 0;                    // multiprocessors
  uint64_t total_bytes = 0;        // device memory
  uint64_t free_bytes = 0;         // free at the time of the query
  uint64_t l2_bytes = 0;
};

// Devices the CUDA runtime sees; 0 without a driver or a device (never an error).
int device_count();
// REQUIRES: index < device_count(). Makes `index` the calling thread's current device.
Result<DeviceInfo> device_info(int index);
Status select_device(int index);

// Device memory from cudaMalloc, freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // kResourceExhausted (with the size and the free memory) when the device lacks `bytes`.
  static Result<DeviceBuffer> allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking CUDA stream. Move-only.
class Stream {
 public:
  static Result<Stream> create();
  Stream() = default;
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  StreamHandle handle() const { return s_; }
  // Waits for the stream's work; returns the first error a launch or a kernel raised.
  Status synchronize() const;

 private:
  StreamHandle s_ = nullptr;
};

// An executable CUDA graph captured from a stream (decode steps replay one: docs/GPU.md).
// Move-only.
class Graph {
 public:
  Graph() = default;
  // Starts capturing the work queued on `stream` (thread-local mode: other threads' CUDA
  // calls are unaffected); nothing queued until end_capture() runs.
  static Status begin_capture(StreamHandle stream);
  // Ends the capture and instantiates the graph. On failure the capture is abandoned.
  static Result<Graph> end_capture(StreamHandle stream);
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Status launch(StreamHandle stream) const;

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
};

// Synchronous copies between host memory and device memory (pageable host memory is fine).
// Existing host memory page-locked for fast, DMA-able copies (cudaHostRegister) for the
// object's lifetime; the memory must outlive it.
class HostRegistration {
 public:
  HostRegistration() = default;
  static Result<HostRegistration> pin(void* data, size_t bytes);
  ~HostRegistration();
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

 private:
  void* ptr_ = nullptr;
};

// Waits for all work on the current device, every stream (cudaDeviceSynchronize).
Status synchronize_device();
Status copy_to_device(void* dst, const void* src, size_t bytes);
Status copy_to_host(void* dst, const void* src, size_t bytes);
Status copy_device_to_device(void* dst, const void* src, size_t bytes);
// `height` runs of `width` bytes, each `pitch` bytes after the previous, in both buffers
// (cudaMemcpy2D: one call for a row of every layer of a KV cache).
Status copy_device_to_device_2d(void* dst, const void* src, size_t width, size_t height,
                                size_t pitch);
Status zero_device(void* dst, size_t bytes);  // cudaMemset to 0, synchronous
// Asynchronous copies on `stream` (src / dst in host memory must stay valid until done).
Status copy_to_device_async(void* dst, const void* src, size_t bytes, StreamHandle stream);
Status copy_to_host_async(void* dst, const void* src, size_t bytes, StreamHandle stream);
Status copy_device_to_device_async(void* dst, const void* src, size_t bytes, StreamHandle stream);
// The device's address of page-locked host memory (a PinnedBuffer's), which kernels may
// read and write directly (mapped memory).
Result<void*> mapped_device_pointer(void* host);
// Page-locked host memory (cudaMallocHost), freed on destruction. Move-only: the staging
// buffers of asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static Result<PinnedBuffer> allocate(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

// The device's copy bandwidth: a device-to-device cudaMemcpy of `bytes` timed with events,
// the best of `reps` after one warm-up, as bytes read plus bytes written per second (the
// yardstick docs/GPU.md measures memory-bound kernels against).
Result<double> measure_copy_bandwidth(size_t bytes, int reps);
// Host-to-device copies from page-locked memory (the bus a split's rows and staged layers
// cross): `bytes` per copy timed with events, the best of `reps` after one warm-up.
Result<double> measure_h2d_bandwidth(size_t bytes, int reps);

// The error the last launch on this thread raised (cudaGetLastError), as a Status.
Status last_launch_status(const char* what);

// Whether kernels launch with programmatic dependent launch (launch_kernel, common.cuh):
// a kernel may start while the one before it on the stream finishes, and waits for it
// (griddepcontrol.wait) before touching what it wrote. Only on compute capability 9.0, the
// one machine code the build carries with those instructions (sm_90a; the compute_80 PTX
// lacks them, so other cards serialize as before).
// Decided once per process, for the calling thread's current device.
bool pdl_enabled();

}  // namespace hypura::compute::cuda
