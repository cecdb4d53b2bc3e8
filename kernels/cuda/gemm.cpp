// CUDA GEMM through cuBLAS. cuBLAS is column-major: a row-major matrix is its transpose in
// column-major, so C = op(A)·op(B) (row-major) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ, i.e. cuBLAS
// with the operands swapped and the same transpose flags.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <unordered_map>

#include "base/error.h"
#include "kernels/cuda/cublas_workspace.h"
#include "kernels/cuda/library_types.h"
#include "kernels/gemm.h"

namespace ember::kernels::cuda {
namespace {

std::atomic<bool> g_allow_tf32{false};

// One handle per thread and device: cuBLAS handles must not be shared between threads that use
// them at the same time. Each stream the handle is used on has a workspace of its own in device
// memory (cuBLAS asks for one per stream: two streams' GEMMs would share split-K partials
// otherwise), made once with cudaMalloc — not from the stream-ordered pool, so that it outlives
// every captured graph. With its default workspace cuBLAS may allocate inside a captured step, and
// cublasSetStream resets the workspace to that default, so every call sets it again after the
// stream (Note [graph-safe kernels] in core/cuda/graph.h). Sizes as the cuBLAS documentation
// recommends for cublasSetWorkspace: 32 MiB on Hopper and later, 4 MiB before. Handles and
// workspaces live until the process ends (destroying them at exit, after the CUDA context may be
// gone, is unsafe); a stream handle reused by a later stream reuses its workspace, which is safe
// because a cuda::Stream waits for its work before it is destroyed.
struct Handle {
  cublasHandle_t handle = nullptr;
  std::size_t workspace_bytes = 0;
  std::unordered_map<cudaStream_t, void*> workspaces;
};

Handle& handle_for_current_device() {
  thread_local std::unordered_map<int, Handle> handles;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  Handle h;
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  h.workspace_bytes = static_cast<std::size_t>(major >= 9 ? 32 : 4) << 20;
  CUBLAS_CHECK(cublasCreate(&h.handle));
  return handles.emplace(device, std::move(h)).first->second;
}

void* workspace_for(Handle& h, cudaStream_t stream) {
  void*& workspace = h.workspaces[stream];
  if (workspace) return workspace;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  EMBER_CHECK(capture == cudaStreamCaptureStatusNone, CudaError,
              "a GEMM inside a CUDA graph capture on a stream that has not run one before: cuBLAS's workspace for "
              "the stream is made at its first GEMM, which cannot be captured. Run the work once eagerly before "
              "capturing it (Note [graph-safe kernels] in core/cuda/graph.h)");
  CUDA_CHECK(cudaMalloc(&workspace, h.workspace_bytes));
  return workspace;
}

cublasOperation_t to_cublas(Transpose t) { return t == Transpose::no ? CUBLAS_OP_N : CUBLAS_OP_T; }

// This thread's handle for the current device, set to work on `stream` with its workspace.
cublasHandle_t handle_on(cudaStream_t stream) {
  Handle& h = handle_for_current_device();
  void* workspace = workspace_for(h, stream);
  CUBLAS_CHECK(cublasSetStream(h.handle, stream));
  CUBLAS_CHECK(cublasSetWorkspace(h.handle, workspace, h.workspace_bytes));  // cublasSetStream reset it
  // Split-K partials are summed in f32, never in a 16-bit C's type: a product rounds once
  // (kernels/gemm.h, gemm_half), whatever split cuBLAS picks on a large GPU.
  const unsigned math = (g_allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                        CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  CUBLAS_CHECK(cublasSetMathMode(h.handle, static_cast<cublasMath_t>(math)));
  return h.handle;
}

int dim(std::size_t v) { return static_cast<int>(v); }
// cuBLAS requires leading dimensions ≥ 1 even for k = 0.
int leading(std::size_t v) { return static_cast<int>(v > 0 ? v : 1); }

}  // namespace

GemmWorkspace gemm_workspace(cudaStream_t stream) {
  Handle& h = handle_for_current_device();
  return {workspace_for(h, stream), h.workspace_bytes};
}

std::size_t gemm_workspace_bytes() { return handle_for_current_device().workspace_bytes; }

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
          std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc,
          cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  CUBLAS_CHECK(cublasSgemm(handle_on(stream), to_cublas(tb), to_cublas(ta), dim(n), dim(m), dim(k), &alpha, b,
                           leading(ldb), a, leading(lda), &beta, c, leading(ldc)));
  count_library_call();
}

void gemm_batched(Transpose ta, Transpose tb, std::size_t batch, std::size_t m, std::size_t n, std::size_t k,
                  const float* a, std::size_t lda, std::size_t stride_a, const float* b, std::size_t ldb,
                  std::size_t stride_b, float* c, std::size_t ldc, std::size_t stride_c, cudaStream_t stream) {
  if (m == 0 || n == 0 || batch == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  const auto stride = [](std::size_t s) { return static_cast<long long>(s); };
  CUBLAS_CHECK(cublasSgemmStridedBatched(handle_on(stream), to_cublas(tb), to_cublas(ta), dim(n), dim(m), dim(k),
                                         &alpha, b, leading(ldb), stride(stride_b), a, leading(lda), stride(stride_a),
                                         &beta, c, leading(ldc), stride(stride_c), dim(batch)));
  count_library_call();
}

void gemm_half(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, DType ab, const void* a,
               std::size_t lda, const void* b, std::size_t ldb, DType c_dtype, void* c, std::size_t ldc,
               bool accumulate, cudaStream_t stream) {
  EMBER_CHECK(is_half(ab) && (c_dtype == DType::f32 || (c_dtype == ab && !accumulate)), DTypeError,
              "gemm_half: A and B in bf16 or f16, C in f32 or (not accumulating) their type; got ", ab, " and ",
              c_dtype);
  if (m == 0 || n == 0) return;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;  // f32 compute: float scales
  const cudaDataType t = library_type(ab);
  CUBLAS_CHECK(cublasGemmEx(handle_on(stream), to_cublas(tb), to_cublas(ta), dim(n), dim(m), dim(k), &alpha, b, t,
                            leading(ldb), a, t, leading(lda), &beta, c, library_type(c_dtype), leading(ldc),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  count_library_call();
}

}  // namespace ember::kernels::cuda
