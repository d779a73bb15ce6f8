// cudaMalloc-backed buffers, streams and device queries (see device.h).
#include "compute/cuda/device.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace hypura::compute::cuda {
namespace {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  const StatusCode code =
      err == cudaErrorMemoryAllocation ? StatusCode::kResourceExhausted : StatusCode::kInternal;
  return Status(code, std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                          cudaGetErrorString(err) + ")");
}

std::string mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error for later calls
    return 0;
  }
  return n;
}

Status select_device(int index) {
  return cuda_status(cudaSetDevice(index), "cudaSetDevice");
}

Result<DeviceInfo> device_info(int index) {
  if (Status s = select_device(index); !s) return s;
  cudaDeviceProp prop{};
  if (Status s = cuda_status(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
      !s) {
    return s;
  }
  DeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.n_sm = prop.multiProcessorCount;
  info.l2_bytes = static_cast<uint64_t>(prop.l2CacheSize);
  size_t free_b = 0, total_b = 0;
  if (Status s = cuda_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"); !s) return s;
  info.total_bytes = total_b;
  info.free_bytes = free_b;
  return info;
}

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const cudaError_t err = cudaMalloc(&b.ptr_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it for later checks
    b.ptr_ = nullptr;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return cuda_status(err, "cudaMalloc")
        .with_context("device memory: " + mib(bytes) + " requested, " + mib(free_b) + " free of " +
                      mib(total_b));
  }
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Result<Stream> Stream::create() {
  Stream s;
  cudaStream_t h = nullptr;
  if (Status st =
          cuda_status(cudaStreamCreateWithFlags(&h, cudaStreamNonBlocking), "cudaStreamCreate");
      !st) {
    return st;
  }
  s.s_ = h;
  return s;
}

Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}

Stream::Stream(Stream&& other) noexcept : s_(std::exchange(other.s_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (s_) cudaStreamDestroy(s_);
    s_ = std::exchange(other.s_, nullptr);
  }
  return *this;
}

Status Stream::synchronize() const {
  if (Status s = cuda_status(cudaGetLastError(), "kernel launch"); !s) return s;
  return cuda_status(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
}

Status Graph::begin_capture(StreamHandle stream) {
  return cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                     "cudaStreamBeginCapture");
}

Result<Graph> Graph::end_capture(StreamHandle stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream, &graph);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    return cuda_status(err, "cudaStreamEndCapture");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ierr = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (ierr != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(ierr, "cudaGraphInstantiate");
  }
  Graph g;
  g.exec_ = exec;
  return g;
}

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

Graph::Graph(Graph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}

Status Graph::launch(StreamHandle stream) const {
  return cuda_status(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream),
                     "cudaGraphLaunch");
}

Result<HostRegistration> HostRegistration::pin(void* data, size_t bytes) {
  HostRegistration r;
  if (data == nullptr || bytes == 0) return r;
  if (Status s =
          cuda_status(cudaHostRegister(data, bytes, cudaHostRegisterDefault), "cudaHostRegister");
      !s) {
    cudaGetLastError();
    return s.with_context("page-locking " + mib(bytes) + " of host memory");
  }
  r.ptr_ = data;
  return r;
}

HostRegistration::~HostRegistration() {
  if (ptr_) cudaHostUnregister(ptr_);
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    if (ptr_) cudaHostUnregister(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
  }
  return *this;
}

Status synchronize_device() {
  if (Status s = cuda_status(cudaGetLastError(), "kernel launch"); !s) return s;
  return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

Status copy_to_device(void* dst, const void* src, size_t bytes) {
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

Status copy_to_host(void* dst, const void* src, size_t bytes) {
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

Status copy_device_to_device(void* dst, const void* src, size_t bytes) {
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
}

Status copy_device_to_device_2d(void* dst, const void* src, size_t width, size_t height,
                                size_t pitch) {
  return cuda_status(cudaMemcpy2D(dst, pitch, src, pitch, width, height, cudaMemcpyDeviceToDevice),
                     "cudaMemcpy2D D2D");
}

Status zero_device(void* dst, size_t bytes) {
  return cuda_status(cudaMemset(dst, 0, bytes), "cudaMemset");
}

Result<PinnedBuffer> PinnedBuffer::allocate(size_t bytes) {
  PinnedBuffer b;
  if (bytes == 0) return b;
  if (Status s = cuda_status(cudaMallocHost(&b.ptr_, bytes), "cudaMallocHost"); !s) {
    cudaGetLastError();
    b.ptr_ = nullptr;
    return s.with_context("pinned host memory: " + mib(bytes));
  }
  return b;
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
  }
  return *this;
}

Status copy_to_device_async(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream),
                     "cudaMemcpyAsync H2D");
}

Status copy_to_host_async(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream),
                     "cudaMemcpyAsync D2H");
}

Status copy_device_to_device_async(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                     "cudaMemcpyAsync D2D");
}

Result<void*> mapped_device_pointer(void* host) {
  void* device = nullptr;
  HYPURA_RETURN_IF_ERROR(
      cuda_status(cudaHostGetDevicePointer(&device, host, 0), "cudaHostGetDevicePointer"));
  return device;
}

Result<double> measure_copy_bandwidth(size_t bytes, int reps) {
  HYPURA_ASSIGN_OR_RETURN(DeviceBuffer src, DeviceBuffer::allocate(bytes));
  HYPURA_ASSIGN_OR_RETURN(DeviceBuffer dst, DeviceBuffer::allocate(bytes));
  HYPURA_RETURN_IF_ERROR(cuda_status(cudaMemset(src.data(), 1, bytes), "cudaMemset"));
  cudaEvent_t start = nullptr, stop = nullptr;
  HYPURA_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&start), "cudaEventCreate"));
  HYPURA_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&stop), "cudaEventCreate"));
  float best_ms = 0;
  Status st;
  for (int r = 0; r <= reps && st.is_ok(); ++r) {
    cudaEventRecord(start);
    cudaMemcpy(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    st = cuda_status(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (r > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;  // r == 0: the warm-up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  HYPURA_RETURN_IF_ERROR(st);
  return best_ms > 0 ? 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) : 0.0;
}

Result<double> measure_h2d_bandwidth(size_t bytes, int reps) {
  HYPURA_ASSIGN_OR_RETURN(DeviceBuffer dst, DeviceBuffer::allocate(bytes));
  void* host = nullptr;
  HYPURA_RETURN_IF_ERROR(cuda_status(cudaMallocHost(&host, bytes), "cudaMallocHost"));
  std::memset(host, 1, bytes);
  cudaEvent_t start = nullptr, stop = nullptr;
  Status st = cuda_status(cudaEventCreate(&start), "cudaEventCreate");
  if (st.is_ok()) st = cuda_status(cudaEventCreate(&stop), "cudaEventCreate");
  float best_ms = 0;
  for (int r = 0; r <= reps && st.is_ok(); ++r) {
    cudaEventRecord(start);
    cudaMemcpyAsync(dst.data(), host, bytes, cudaMemcpyHostToDevice, nullptr);
    cudaEventRecord(stop);
    st = cuda_status(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (r > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;  // r == 0: the warm-up
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  cudaFreeHost(host);
  HYPURA_RETURN_IF_ERROR(st);
  return best_ms > 0 ? static_cast<double>(bytes) / (best_ms * 1e-3) : 0.0;
}

Status last_launch_status(const char* what) {
  return cuda_status(cudaGetLastError(), what);
}

bool pdl_enabled() {
  static const bool enabled = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major == 9 && minor == 0;
  }();
  return enabled;
}

}  // namespace hypura::compute::cuda
