// Matrix multiply C = α·op(A)·op(B) + β·C on row-major matrices, op = identity or transpose.
// op(A) is [m, k], op(B) is [k, n], C is [m, n]; lda, ldb, ldc are the row strides of A, B, C
// as stored (so A stored [k, m] with Transpose::yes has lda ≥ m).
// CPU: OpenBLAS cblas_?gemm, or the builtin blocked GEMM when built with EMBER_BLAS=builtin;
// float and double. CUDA: cuBLAS SGEMM on `stream`, exact fp32 unless TF32 is allowed.
// β = 0 means C is not read (NaN in C does not propagate), as in BLAS.
#pragma once

#include <string>

#include "core/base/dtype.h"
#include "kernels/common.h"

namespace ember::kernels {
enum class Transpose : std::uint8_t { no, yes };
}

namespace ember::kernels::cpu {

template <class T>
void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);
// The builtin GEMM, always compiled, so that tests can compare it with OpenBLAS.
template <class T>
void gemm_builtin(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                  std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);
// Holds OpenBLAS at one thread of its own, once per process (Note [CPU threads]: ember's pool
// runs the GEMMs' blocks). The pool calls it; so does gemm() through it.
void hold_library_threads();
const char* blas_name();  // "openblas" or "builtin"
// OpenBLAS's kernel table in use (Note [OpenBLAS core] in kernels/cpu/blas_library.cpp), and why.
std::string blas_core();
// Seconds this thread has spent inside gemm() since it started (ember::cpu_gemm_seconds). Two
// clock reads per call, ~40 ns against the microseconds of even the smallest GEMM a layer makes.
double gemm_seconds();

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
          std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc, cudaStream_t stream);
// C = op(A)·op(B), or C += op(A)·op(B) when `accumulate`, with A and B in bf16 or f16 (`ab`):
// cublasGemmEx with f32 compute (tensor cores where the GPU has them). C is f32, or of type `ab`
// (not accumulating) with each f32 sum rounded once to it. Tensor cores sum in an order and width
// of their own, so results may differ from the widened SGEMM's in the last bits.
void gemm_half(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, DType ab, const void* a,
               std::size_t lda, const void* b, std::size_t ldb, DType c_dtype, void* c, std::size_t ldc,
               bool accumulate, cudaStream_t stream);
// TF32 tensor-core math (inputs rounded to 10 mantissa bits) for every f32 product on CUDA: cuBLAS's
// SGEMM, cuBLASLt's epilogue GEMMs and cuDNN's convolutions (Note [cuDNN math]). Off by default;
// core sets it (ember::cuda::set_allow_tf32, or EMBER_ALLOW_TF32=1).
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace ember::kernels::cuda
