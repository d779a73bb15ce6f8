// Gemm: row-major y (n, R) = x (n, K) W^T with W row-major (R, K) is, in cuBLAS's
// column-major terms, Y (R x n) = W^T(stored K x R)^T . X (K x n): op(A) = T on W with
// lda = K, op(B) = N on x with ldb = K, C = y with ldc = R.
#include "compute/cuda/gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "compute/cuda/dequant.h"
#include "compute/cuda/expert_gemm.h"
#include "compute/cuda/matvec.h"
#include "compute/cuda/quantize.h"
#include "quant/quant.h"

namespace hypura::compute::cuda {
namespace {

// cuBLAS is loaded with dlopen when the first Gemm is made, not linked: linking it costs
// every process about 50 MiB of resident memory at start (relocations of its 600 MiB of
// libraries), which the memory ledger charges even when nothing runs on the GPU.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_batched = nullptr;
  // cublasGemmEx has a C++ overload (cudaDataType compute type): name the C one.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*gemm_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, long long,
                                    const void*, cudaDataType, int, long long, const void*, void*,
                                    cudaDataType, int, long long, int, cublasComputeType_t,
                                    cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  std::string error;  // why it could not be loaded, or ""
};

const Cublas& cublas() {
  static const Cublas api = [] {
    Cublas c;
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      c.error = name + " not found (" + dlerror() + "): the GPU's prompt products need cuBLAS";
      return c;
    }
    const auto sym = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (fn == nullptr && c.error.empty()) c.error = name + " lacks " + symbol;
    };
    sym(c.create, "cublasCreate_v2");
    sym(c.destroy, "cublasDestroy_v2");
    sym(c.set_stream, "cublasSetStream_v2");
    sym(c.set_math_mode, "cublasSetMathMode");
    sym(c.sgemm, "cublasSgemm_v2");
    sym(c.gemm_ex, "cublasGemmEx");
    sym(c.sgemm_batched, "cublasSgemmStridedBatched");
    sym(c.gemm_batched_ex, "cublasGemmStridedBatchedEx");
    sym(c.status_name, "cublasGetStatusName");
    sym(c.status_string, "cublasGetStatusString");
    return c;
  }();
  return api;
}

Status cublas_status(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::ok();
  const StatusCode code =
      st == CUBLAS_STATUS_ALLOC_FAILED ? StatusCode::kResourceExhausted : StatusCode::kInternal;
  return Status(code, std::string(what) + ": " + cublas().status_name(st) + " (" +
                          cublas().status_string(st) + ")");
}

// Launches the expert kernel over every expert with rows: tiles of up to kExpertTileRows
// grouped rows, kMaxExpertTiles a launch. The activations: x16, or xq's 8-bit ones where set.
void expert_products(const WeightView& w, size_t expert_bytes, std::span<const int64_t> begin,
                     const uint16_t* x16, const ActQ8& xq, float* y, StreamHandle stream) {
  ExpertGemmArgs a;
  a.xq = xq.q;
  a.xd = xq.d;
  a.w = w.data;
  a.expert_bytes = expert_bytes;
  a.row_bytes = w.row_bytes();
  a.n_rows = w.n_rows;
  a.n_cols = w.n_cols;
  a.x = x16;
  a.y = y;
  a.stream = stream;
  ExpertTiles tiles;
  const auto type_id = static_cast<uint32_t>(w.type);
  for (size_t e = 0; e + 1 < begin.size(); ++e) {
    for (int64_t r = begin[e]; r < begin[e + 1]; r += kExpertTileRows) {
      if (tiles.count == kMaxExpertTiles) {
        launch_expert_gemm(type_id, a, tiles);
        tiles.count = 0;
      }
      tiles.first[tiles.count] = static_cast<int32_t>(r);
      tiles.expert[tiles.count] = static_cast<uint16_t>(e);
      tiles.rows[tiles.count] =
          static_cast<uint8_t>(std::min<int64_t>(kExpertTileRows, begin[e + 1] - r));
      ++tiles.count;
    }
  }
  if (tiles.count > 0) launch_expert_gemm(type_id, a, tiles);
}

// Tile rows: a multiple of 64 (aligned output columns) within tile_elems.
int64_t tile_rows(int64_t tile_elems, int64_t n_cols, int64_t n_rows) {
  const int64_t rows = std::max<int64_t>(64, tile_elems / n_cols / 64 * 64);
  return std::min(rows, n_rows);
}

}  // namespace

size_t Gemm::scratch_bytes(int64_t max_rows, int64_t max_cols, int64_t tile_elems,
                           int64_t x_elems) {
  return static_cast<size_t>(std::max(max_rows * max_cols, x_elems)) * 2 +
         static_cast<size_t>(tile_elems) * 2;
}

Result<std::unique_ptr<Gemm>> Gemm::create(StreamHandle stream, int64_t max_rows, int64_t max_cols,
                                           int64_t tile_elems, int64_t x_elems) {
  std::unique_ptr<Gemm> g(new Gemm());
  g->stream_ = stream;
  g->max_rows_ = max_rows;
  g->max_cols_ = max_cols;
  g->x_elems_ = std::max(max_rows * max_cols, x_elems);
  // At least 64 rows of the widest matrix, so a tile always holds 64 rows.
  g->tile_elems_ = std::max(tile_elems, 64 * max_cols);
  HYPURA_ASSIGN_OR_RETURN(g->x16_, DeviceBuffer::allocate(static_cast<size_t>(g->x_elems_) * 2));
  HYPURA_ASSIGN_OR_RETURN(g->w16_, DeviceBuffer::allocate(static_cast<size_t>(g->tile_elems_) * 2));
  const Cublas& api = cublas();
  if (!api.error.empty()) return unsupported(api.error);
  cublasHandle_t h = nullptr;
  HYPURA_RETURN_IF_ERROR(cublas_status(api.create(&h), "cublasCreate"));
  g->handle_ = h;
  HYPURA_RETURN_IF_ERROR(cublas_status(api.set_stream(h, stream), "cublasSetStream"));
  // FP32 products stay FP32 (no TF32), the F16 ones accumulate in FP32.
  HYPURA_RETURN_IF_ERROR(
      cublas_status(api.set_math_mode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  return g;
}

Gemm::~Gemm() {
  if (handle_ != nullptr) cublas().destroy(handle_);
}

// Quantized weights: the CPU's 8-bit activations widened to F16; float ones: F16 of x.
void Gemm::convert(gguf::GgmlType type, const float* x, int64_t count) {
  auto* x16 = x16_.as<uint16_t>();
  const gguf::GgmlType act_type = quant::activation_type(type);
  if (act_type == gguf::GgmlType::Q8_0 || act_type == gguf::GgmlType::Q8_1 ||
      act_type == gguf::GgmlType::Q8_K) {
    const ActFormat f = act_type == gguf::GgmlType::Q8_K   ? ActFormat::kQ8_K
                        : act_type == gguf::GgmlType::Q8_1 ? ActFormat::kQ8_1
                                                           : ActFormat::kQ8_0;
    quantize_to_f16(f, x, count, x16, stream_);
  } else {
    f32_to_f16(x, count, x16, stream_);
  }
}

Status Gemm::matmul(const WeightView& w, const float* x, int64_t n, float* y) {
  const WeightView* ws[1] = {&w};
  float* ys[1] = {y};
  return matmul_shared(ws, ys, 1, x, n);
}

Status Gemm::matmul_shared(const WeightView* const* ws, float* const* ys, int count, const float* x,
                           int64_t n) {
  const auto* x16 = x16_.as<uint16_t>();
  gguf::GgmlType converted = gguf::GgmlType::I64;  // the activation format x16 holds (none yet)
  const float one = 1.0f, zero = 0.0f;
  for (int i = 0; i < count; ++i) {
    const WeightView& w = *ws[i];
    float* y = ys[i];
    const int m_all = static_cast<int>(w.n_rows), k = static_cast<int>(w.n_cols),
              nn = static_cast<int>(n);
    if (w.type == gguf::GgmlType::F32) {
      HYPURA_RETURN_IF_ERROR(
          cublas_status(cublas().sgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m_all, nn, k, &one,
                                       static_cast<const float*>(w.data), k, x, k, &zero, y, m_all),
                        "cublasSgemm"));
      continue;
    }
    const gguf::GgmlType act_type = quant::activation_type(w.type);
    if (act_type != converted) {
      convert(w.type, x, n * w.n_cols);
      converted = act_type;
    }
    const int64_t rows = tile_rows(tile_elems_, w.n_cols, w.n_rows);
    for (int64_t r0 = 0; r0 < w.n_rows; r0 += rows) {
      const int64_t tr = std::min(rows, w.n_rows - r0);
      const void* a = nullptr;
      if (w.type == gguf::GgmlType::F16) {
        a = w.row(r0);
      } else {
        dequantize_rows_f16(w, r0, tr, w16_.as<uint16_t>(), stream_);
        a = w16_.data();
      }
      HYPURA_RETURN_IF_ERROR(cublas_status(
          cublas().gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(tr), nn, k, &one, a,
                           CUDA_R_16F, k, x16, CUDA_R_16F, k, &zero, y + r0, CUDA_R_32F, m_all,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx"));
    }
  }
  return Status::ok();
}

Status Gemm::matmul_experts(const WeightView* const* ws, float* const* ys, int count,
                            std::span<const int64_t> begin, const float* x) {
  const int64_t n_expert = static_cast<int64_t>(begin.size()) - 1, n = begin.back();
  // What x16_'s memory holds: x in this activation format widened to F16 (converted), or
  // quantized to Q8_0 (as_q8.q set); none yet.
  gguf::GgmlType converted = gguf::GgmlType::I64;
  ActQ8 as_q8;
  const float one = 1.0f, zero = 0.0f;
  for (int i = 0; i < count; ++i) {
    const WeightView& w = *ws[i];
    const int64_t r = w.n_rows, k = w.n_cols, expert = r * k;
    const size_t expert_bytes = quant::row_size(w.type, k) * static_cast<size_t>(r);
    const auto* base = static_cast<const uint8_t*>(w.data);
    const bool f32 = w.type == gguf::GgmlType::F32, f16 = w.type == gguf::GgmlType::F16;
    const auto type_id = static_cast<uint32_t>(w.type);
    if (n_expert <= 65536 && expert_gemm_takes_q8(type_id, k) &&
        act_q8_layout(n * k).total <= x16_.size()) {
      if (as_q8.q == nullptr) {
        as_q8 = quantize_act(ActFormat::kQ8_0, x, n * k, x16_.data(), stream_);
        converted = gguf::GgmlType::I64;
      }
      expert_products(w, expert_bytes, begin, nullptr, as_q8, ys[i], stream_);
      continue;
    }
    if (!f32 && quant::activation_type(w.type) != converted) {
      as_q8 = {};
      if (n * k > x_elems_)
        return Status(StatusCode::kInternal, "the experts' rows exceed the prefill scratch");
      convert(w.type, x, n * k);
      converted = quant::activation_type(w.type);
    }
    if (n_expert <= 65536 && expert_gemm_supported(type_id, k)) {
      expert_products(w, expert_bytes, begin, x16_.as<uint16_t>(), {}, ys[i], stream_);
      continue;
    }
    // Tiles of consecutive experts, from the first with rows to the last within the tile.
    const int64_t per_tile = f32 || f16 ? n_expert : std::max<int64_t>(1, tile_elems_ / expert);
    for (int64_t e0 = 0; e0 < n_expert;) {
      while (e0 < n_expert && begin[e0 + 1] == begin[e0]) ++e0;
      if (e0 == n_expert) break;
      int64_t e1 = std::min(n_expert, e0 + per_tile);
      while (begin[e1] == begin[e1 - 1]) --e1;  // (e0 has rows, so this stops above it)
      const uint16_t* tile = nullptr;
      if (!f32 && !f16) {
        const WeightView stacked{base + e0 * expert_bytes, w.type, k, (e1 - e0) * r};
        dequantize_rows_f16(stacked, 0, (e1 - e0) * r, w16_.as<uint16_t>(), stream_);
        tile = w16_.as<uint16_t>();
      }
      for (int64_t e = e0; e < e1; ++e) {
        const int64_t m = begin[e + 1] - begin[e];
        if (m == 0) continue;
        float* y = ys[i] + begin[e] * r;
        const int ri = static_cast<int>(r), mi = static_cast<int>(m), ki = static_cast<int>(k);
        if (f32) {
          HYPURA_RETURN_IF_ERROR(
              cublas_status(cublas().sgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, ri, mi, ki, &one,
                                           reinterpret_cast<const float*>(base + e * expert_bytes),
                                           ki, x + begin[e] * k, ki, &zero, y, ri),
                            "cublasSgemm"));
          continue;
        }
        const void* a = f16 ? static_cast<const void*>(base + e * expert_bytes)
                            : static_cast<const void*>(tile + (e - e0) * expert);
        HYPURA_RETURN_IF_ERROR(cublas_status(
            cublas().gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, ri, mi, ki, &one, a, CUDA_R_16F, ki,
                             x16_.as<uint16_t>() + begin[e] * k, CUDA_R_16F, ki, &zero, y,
                             CUDA_R_32F, ri, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx"));
      }
      e0 = e1;
    }
  }
  return Status::ok();
}

// Head h's product in cuBLAS's terms: Y_h (r x n, ldc n_heads * r) = W_h^T(k x r)^T . X_h
// (k x n, ldb n_heads * k); consecutive heads are r * k, k and r elements apart.
Status Gemm::matmul_heads(const WeightView& w, int64_t n_heads, const float* x, int64_t n,
                          float* y) {
  const int64_t r = w.n_rows / n_heads, k = w.n_cols, head = r * k;
  const float one = 1.0f, zero = 0.0f;
  if (w.type == gguf::GgmlType::F32) {
    return cublas_status(
        cublas().sgemm_batched(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(r),
                               static_cast<int>(n), static_cast<int>(k), &one,
                               static_cast<const float*>(w.data), static_cast<int>(k), head, x,
                               static_cast<int>(n_heads * k), k, &zero, y,
                               static_cast<int>(n_heads * r), r, static_cast<int>(n_heads)),
        "cublasSgemmStridedBatched");
  }
  // Tokens per conversion of the activations (x16_ holds max_rows * max_cols values).
  const int64_t chunk = std::min(n, x_elems_ / (n_heads * k));
  const int64_t heads_per_tile = w.type == gguf::GgmlType::F16 ? n_heads : tile_elems_ / head;
  if (chunk < 1 || heads_per_tile < 1)
    return Status(StatusCode::kInternal, "a head's product exceeds the prefill scratch");
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t nt = std::min(chunk, n - t0);
    convert(w.type, x + t0 * n_heads * k, nt * n_heads * k);
    for (int64_t h0 = 0; h0 < n_heads; h0 += heads_per_tile) {
      const int64_t nh = std::min(heads_per_tile, n_heads - h0);
      const void* a = nullptr;
      if (w.type == gguf::GgmlType::F16) {
        a = w.row(h0 * r);
      } else {
        dequantize_rows_f16(w, h0 * r, nh * r, w16_.as<uint16_t>(), stream_);
        a = w16_.data();
      }
      HYPURA_RETURN_IF_ERROR(cublas_status(
          cublas().gemm_batched_ex(
              handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(r), static_cast<int>(nt),
              static_cast<int>(k), &one, a, CUDA_R_16F, static_cast<int>(k), head,
              x16_.as<uint16_t>() + h0 * k, CUDA_R_16F, static_cast<int>(n_heads * k), k, &zero,
              y + (t0 * n_heads + h0) * r, CUDA_R_32F, static_cast<int>(n_heads * r), r,
              static_cast<int>(nh), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx"));
    }
  }
  return Status::ok();
}

}  // namespace hypura::compute::cuda
