// cuBLAS on the software GPU: the calls ember makes, with their arguments checked as cuBLAS
// documents them, and the GEMM computed by a plain reference loop in stream order.
//
// cublasSgemm is a full model (and cublasSgemmStridedBatched, the same per batch element): column-major, both transpose
// flags, alpha and beta read from host memory at the call (cuBLAS's default pointer mode), C not read when beta is 0
// (so NaN in an unwritten C does not leak, as on a GPU), every matrix range checked against its allocation and against
// the other streams. cublasGemmEx is the same model for the types ember's mixed precision uses — bf16 or f16 A and B, C
// in f32 or their type, f32 compute — and refuses the combinations cuBLAS does not list. (cuBLASLt is cublaslt.cpp.)
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
#include "numerics.h"
#include "runtime.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  int device = 0;
  void* workspace = nullptr;  // null: cuBLAS's default pool
  std::size_t workspace_bytes = 0;
  bool tf32 = false;                        // CUBLAS_TF32_TENSOR_OP_MATH: f32 routines may round their inputs to TF32
  bool reduced_precision_reduction = true;  // cleared by CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION
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

std::size_t matrix_bytes(int rows, int cols, int ld, std::size_t element) {
  if (rows == 0 || cols == 0) return 0;
  return (static_cast<std::size_t>(cols - 1) * static_cast<std::size_t>(ld) + static_cast<std::size_t>(rows)) * element;
}

constexpr std::size_t kDefaultWorkspace = std::size_t{4} << 20;

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// A matrix argument: its memory, element type and leading dimension; `tf32`: f32 elements are
// read rounded to TF32 (numerics.h), as tensor cores take them when TF32 is allowed.
struct Matrix {
  const void* data;
  cudaDataType type;
  int ld;
  bool tf32 = false;
};

std::size_t element_bytes(cudaDataType type) { return type == CUDA_R_32F ? 4 : 2; }

ember_sim::Format format_of(cudaDataType type) {
  return type == CUDA_R_16BF ? ember_sim::Format::bf16
                             : (type == CUDA_R_16F ? ember_sim::Format::f16 : ember_sim::Format::f32);
}

// Element i as f32: bf16 and f16 widen exactly; f32 rounded to TF32 where the call allows it.
float load(const Matrix& a, std::size_t i) {
  const float v = ember_sim::load(a.data, i, format_of(a.type));
  return a.tf32 && a.type == CUDA_R_32F ? ember_sim::tf32_round(v) : v;
}

// Stores an f32 result, rounded to nearest even for a 16-bit C.
void store(const Matrix& c, std::size_t i, float value) {
  ember_sim::store(const_cast<void*>(c.data), i, format_of(c.type), value);
}

// A strided batch: `count` products, the i-th on A + i·a, B + i·b and C + i·c (elements).
struct Strides {
  int count = 1;
  long long a = 0, b = 0, c = 0;
};

// The matrix of batch element i.
Matrix element_of(Matrix m, long long stride, int i) {
  m.data = static_cast<const char*>(m.data) + static_cast<std::size_t>(stride * i) * element_bytes(m.type);
  return m;
}

// C = α·op(A)·op(B) + β·C, column-major, for cublasSgemm, cublasGemmEx and, per batch element,
// cublasSgemmStridedBatched (`name`): the argument checks cuBLAS documents, every matrix range checked against its
// allocation and the other streams, then the products in stream order, each column's sums in f32 in order of k. A
// product of two bf16 or two f16 values is exact in f32, so in the 16-bit types this is the f32 GEMM of the widened
// values; a GPU's tensor cores sum in an order (and width) of their own, so results on one may differ in the last bits.
cublasStatus_t gemm_model(cublasHandle_t handle, const char* name, cublasOperation_t transa, cublasOperation_t transb,
                          int m, int n, int k, const float* alpha, Matrix A, Matrix B, const float* beta, Matrix C,
                          Strides batch = {}) {
  if (!known(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const int a_rows = ta ? k : m, b_rows = tb ? n : k;
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || A.ld < std::max(1, a_rows) ||
      B.ld < std::max(1, b_rows) || C.ld < std::max(1, m) || !alpha || !beta || batch.count < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (handle->device != ember_sim::rt::current_device())
    ember_sim::fail(std::string(name) + ": the handle was created on cuda:" + std::to_string(handle->device) +
                    " but cuda:" + std::to_string(ember_sim::rt::current_device()) +
                    " is current (a cuBLAS handle belongs to one device)");
  if (m == 0 || n == 0 || batch.count == 0) return CUBLAS_STATUS_SUCCESS;
  const float a_scale = *alpha, b_scale = *beta;  // host pointer mode: read now
  std::vector<ember_sim::rt::Access> accesses;
  const bool reads_ab = k > 0 && a_scale != 0.0f;
  const std::string of = std::string(" of ") + name;
  for (int i = 0; i < batch.count; ++i) {  // each batch element's own ranges: the gaps between them are not touched
    const std::string which = batch.count > 1 ? " (batch element " + std::to_string(i) + ")" : "";
    if (reads_ab) {
      accesses.push_back({element_of(A, batch.a, i).data, matrix_bytes(a_rows, ta ? m : k, A.ld, element_bytes(A.type)),
                          false, "matrix A" + which + of});
      accesses.push_back({element_of(B, batch.b, i).data, matrix_bytes(b_rows, tb ? k : n, B.ld, element_bytes(B.type)),
                          false, "matrix B" + which + of});
    }
    accesses.push_back({element_of(C, batch.c, i).data, matrix_bytes(m, n, C.ld, element_bytes(C.type)), true,
                        "matrix C" + which + of});
  }
  if (handle->workspace) accesses.push_back({handle->workspace, handle->workspace_bytes, true, "the workspace" + of});
  const auto multiply = [=](const Matrix& A, const Matrix& B, const Matrix& C) {
    std::vector<float> column(static_cast<std::size_t>(m));
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) column[static_cast<std::size_t>(i)] = 0.0f;
      if (reads_ab) {
        for (int p = 0; p < k; ++p) {
          const float b = load(B, tb ? static_cast<std::size_t>(p) * B.ld + j : static_cast<std::size_t>(j) * B.ld + p);
          for (int i = 0; i < m; ++i) {
            const float a =
                load(A, ta ? static_cast<std::size_t>(i) * A.ld + p : static_cast<std::size_t>(p) * A.ld + i);
            column[static_cast<std::size_t>(i)] += a * b;
          }
        }
      }
      for (int i = 0; i < m; ++i) {
        const std::size_t at = static_cast<std::size_t>(j) * C.ld + i;
        const float product = a_scale * column[static_cast<std::size_t>(i)];
        store(C, at, b_scale == 0.0f ? product : product + b_scale * load(C, at));  // beta = 0: C is not read
      }
    }
  };
  const auto work = [=] {
    for (int i = 0; i < batch.count; ++i)
      multiply(element_of(A, batch.a, i), element_of(B, batch.b, i), element_of(C, batch.c, i));
  };
  // Without a user workspace, cuBLAS's default pool (see the file comment).
  void* pool_workspace = nullptr;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (!handle->workspace && cudaStreamIsCapturing(handle->stream, &capture) == cudaSuccess &&
      capture == cudaStreamCaptureStatusActive &&
      cudaMallocAsync(&pool_workspace, kDefaultWorkspace, handle->stream) != cudaSuccess)
    return CUBLAS_STATUS_ALLOC_FAILED;
  const cudaError_t e = ember_sim::rt::enqueue_work(handle->stream, name, std::move(accesses), work);
  if (pool_workspace) cudaFreeAsync(pool_workspace, handle->stream);
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

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

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!known(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  // The low bits name the mode; DISALLOW_REDUCED_PRECISION_REDUCTION is a flag above them.
  handle->tf32 = (static_cast<unsigned>(mode) & 0xfu) == CUBLAS_TF32_TENSOR_OP_MATH;
  handle->reduced_precision_reduction = (mode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) == 0;
  return CUBLAS_STATUS_SUCCESS;
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
  const bool tf32 = known(handle) && handle->tf32;
  return gemm_model(handle, "cublasSgemm", transa, transb, m, n, k, alpha, {A, CUDA_R_32F, lda, tf32},
                    {B, CUDA_R_32F, ldb, tf32}, beta, {C, CUDA_R_32F, ldc});
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb, long long int strideB,
                                         const float* beta, float* C, int ldc, long long int strideC, int batchCount) {
  const bool tf32 = known(handle) && handle->tf32;
  return gemm_model(handle, "cublasSgemmStridedBatched", transa, transb, m, n, k, alpha, {A, CUDA_R_32F, lda, tf32},
                    {B, CUDA_R_32F, ldb, tf32}, beta, {C, CUDA_R_32F, ldc}, {batchCount, strideA, strideB, strideC});
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  if (!known(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  // The combinations cuBLAS lists for cublasGemmEx with f32 compute (the scale type is then
  // float): A and B of one type, C in f32 or in that type. TF32's compute types take f32 only.
  const bool f32_compute = computeType == CUBLAS_COMPUTE_32F || computeType == CUBLAS_COMPUTE_32F_PEDANTIC;
  const bool tf32_compute = computeType == CUBLAS_COMPUTE_32F_FAST_TF32;
  const bool half_inputs = Atype == CUDA_R_16BF || Atype == CUDA_R_16F;
  const bool supported =
      Atype == Btype && ((f32_compute && half_inputs && (Ctype == Atype || Ctype == CUDA_R_32F)) ||
                         ((f32_compute || tf32_compute) && Atype == CUDA_R_32F && Ctype == CUDA_R_32F));
  if (!supported) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP) return CUBLAS_STATUS_NOT_SUPPORTED;
  // Stricter than cuBLAS: with a 16-bit C, a GPU with many multiprocessors may split k and add the
  // partial sums in C's type, rounding each element more than once, unless the handle forbids it.
  if (Ctype != CUDA_R_32F && handle->reduced_precision_reduction)
    ember_sim::fail(
        "cublasGemmEx: a 16-bit C on a handle whose math mode allows reduced-precision split-K sums "
        "(add CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION to cublasSetMathMode: each element must "
        "be rounded once)");
  // TF32 for f32 inputs: asked for by the compute type, or allowed by the handle's math mode
  // under CUBLAS_COMPUTE_32F (never under PEDANTIC).
  const bool tf32 = tf32_compute || (computeType == CUBLAS_COMPUTE_32F && handle->tf32);
  return gemm_model(handle, "cublasGemmEx", transa, transb, m, n, k, static_cast<const float*>(alpha),
                    {A, Atype, lda, tf32}, {B, Btype, ldb, tf32}, static_cast<const float*>(beta), {C, Ctype, ldc});
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
