// cuBLAS on the software GPU: the calls ember makes, with their arguments checked as cuBLAS
// documents them, and the GEMM computed by a plain reference loop in stream order.
//
// cublasSgemm is a full model: column-major, both transpose flags, alpha and beta read from host
// memory at the call (cuBLAS's default pointer mode), C not read when beta is 0 (so NaN in an
// unwritten C does not leak, as on a GPU), every matrix range checked against its allocation and
// against the other streams. (cuBLASLt is cublaslt.cpp.)
//
// The workspace, as cublasSetWorkspace documents it: a user workspace (aligned to 256 bytes) is
// used until cublasSetStream, which resets the handle to cuBLAS's default workspace pool. The model
// of that pool under stream capture: memory cuBLAS takes on the handle's stream around the call,
// stream-ordered — so a captured GEMM without a user workspace adds a memory-allocation node (and a
// free node) to the graph, which every replay would then allocate. A user
// workspace is written by the call, so two streams sharing one unordered are reported.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "executor.h"
#include "runtime.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  int device = 0;
  void* workspace = nullptr;  // null: cuBLAS's default pool
  std::size_t workspace_bytes = 0;
};

namespace {

// Every live handle: a call with any other is refused as cuBLAS would (and the handles a program
// keeps until it exits stay reachable, which is not a leak).
template <class Handle>
std::set<Handle>& live() {
  static auto* handles = new std::set<Handle>;
  return *handles;
}
std::mutex handles_mutex;

template <class Handle>
bool known(Handle h) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  return live<Handle>().count(h) != 0;
}
template <class Handle>
void add(Handle h) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  live<Handle>().insert(h);
}
template <class Handle>
bool remove(Handle h) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  return live<Handle>().erase(h) != 0;
}

std::size_t matrix_bytes(int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return 0;
  return (static_cast<std::size_t>(cols - 1) * static_cast<std::size_t>(ld) + static_cast<std::size_t>(rows)) *
         sizeof(float);
}

constexpr std::size_t kDefaultWorkspace = std::size_t{4} << 20;

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext{nullptr, ember_sim::rt::current_device()};
  add(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!remove(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!known(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  handle->workspace = nullptr;  // documented: cublasSetStream resets the workspace to the default pool
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  // TF32 changes only how products are rounded on tensor cores; the model computes in full fp32.
  return known(handle) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (!known(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (reinterpret_cast<std::uintptr_t>(workspace) % 256 != 0) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = bytes ? workspace : nullptr;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  if (!known(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const int a_rows = ta ? k : m, b_rows = tb ? n : k;
  // The argument checks cuBLAS documents for cublasSgemm.
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || lda < std::max(1, a_rows) ||
      ldb < std::max(1, b_rows) || ldc < std::max(1, m) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (handle->device != ember_sim::rt::current_device())
    ember_sim::fail("cublasSgemm: the handle was created on cuda:" + std::to_string(handle->device) +
                    " but cuda:" + std::to_string(ember_sim::rt::current_device()) +
                    " is current (a cuBLAS handle belongs to one device)");
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float a_scale = *alpha, b_scale = *beta;  // host pointer mode: read now
  std::vector<ember_sim::rt::Access> accesses;
  const bool reads_ab = k > 0 && a_scale != 0.0f;
  if (reads_ab) {
    accesses.push_back({A, matrix_bytes(a_rows, ta ? m : k, lda), false, "matrix A of cublasSgemm"});
    accesses.push_back({B, matrix_bytes(b_rows, tb ? k : n, ldb), false, "matrix B of cublasSgemm"});
  }
  accesses.push_back({C, matrix_bytes(m, n, ldc), true, "matrix C of cublasSgemm"});
  if (handle->workspace)
    accesses.push_back({handle->workspace, handle->workspace_bytes, true, "the workspace of cublasSgemm"});
  const auto work = [=] {
    std::vector<float> column(static_cast<std::size_t>(m));
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) column[static_cast<std::size_t>(i)] = 0.0f;
      if (reads_ab) {
        for (int p = 0; p < k; ++p) {
          const float b = tb ? B[static_cast<std::size_t>(p) * ldb + j] : B[static_cast<std::size_t>(j) * ldb + p];
          for (int i = 0; i < m; ++i) {
            const float a = ta ? A[static_cast<std::size_t>(i) * lda + p] : A[static_cast<std::size_t>(p) * lda + i];
            column[static_cast<std::size_t>(i)] += a * b;
          }
        }
      }
      float* c = C + static_cast<std::size_t>(j) * ldc;
      for (int i = 0; i < m; ++i) {
        const float product = a_scale * column[static_cast<std::size_t>(i)];
        c[i] = b_scale == 0.0f ? product : product + b_scale * c[i];  // beta = 0: C is not read
      }
    }
  };
  // Without a user workspace, cuBLAS's default pool (see the file comment).
  void* pool_workspace = nullptr;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (!handle->workspace && cudaStreamIsCapturing(handle->stream, &capture) == cudaSuccess &&
      capture == cudaStreamCaptureStatusActive &&
      cudaMallocAsync(&pool_workspace, kDefaultWorkspace, handle->stream) != cudaSuccess)
    return CUBLAS_STATUS_ALLOC_FAILED;
  const cudaError_t e = ember_sim::rt::enqueue_work(handle->stream, "cublasSgemm", std::move(accesses), work);
  if (pool_workspace) cudaFreeAsync(pool_workspace, handle->stream);
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported (by the software GPU)";
    default:
      return "unknown error";
  }
}

}  // extern "C"
