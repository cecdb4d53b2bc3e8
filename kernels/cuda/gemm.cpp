// CUDA GEMM through cuBLAS. cuBLAS is column-major: a row-major matrix is its transpose in
// column-major, so C = op(A)·op(B) (row-major) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ, i.e. cuBLAS
// with the operands swapped and the same transpose flags.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <unordered_map>

#include "core/error.h"
#include "kernels/gemm.h"

namespace ember::kernels::cuda {
namespace {

std::atomic<bool> g_allow_tf32{false};

// One handle per thread and device: cuBLAS handles must not be shared between threads that use
// them at the same time. They live until the process ends (destroying them at exit, after the
// CUDA context may be gone, is unsafe).
cublasHandle_t handle_for_current_device() {
  thread_local std::unordered_map<int, cublasHandle_t> handles;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasHandle_t handle = nullptr;
  CUBLAS_CHECK(cublasCreate(&handle));
  handles.emplace(device, handle);
  return handle;
}

cublasOperation_t to_cublas(Transpose t) { return t == Transpose::no ? CUBLAS_OP_N : CUBLAS_OP_T; }

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
          std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc,
          cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  cublasHandle_t handle = handle_for_current_device();
  CUBLAS_CHECK(cublasSetStream(handle, stream));
  CUBLAS_CHECK(cublasSetMathMode(handle, g_allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  auto i = [](std::size_t v) { return static_cast<int>(v); };
  // cuBLAS requires leading dimensions ≥ 1 even for k = 0.
  auto ld = [](std::size_t v) { return static_cast<int>(v > 0 ? v : 1); };
  CUBLAS_CHECK(cublasSgemm(handle, to_cublas(tb), to_cublas(ta), i(n), i(m), i(k), &alpha, b, ld(ldb), a, ld(lda),
                           &beta, c, ld(ldc)));
}

}  // namespace ember::kernels::cuda
