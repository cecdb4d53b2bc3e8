// Matrix multiply C = α·op(A)·op(B) + β·C on row-major matrices, op = identity or transpose.
// op(A) is [m, k], op(B) is [k, n], C is [m, n]; lda, ldb, ldc are the row strides of A, B, C
// as stored (so A stored [k, m] with Transpose::yes has lda ≥ m).
// CPU: float and double; float on a CPU with AVX512F in ember's own kernel (below), the rest in
// OpenBLAS cblas_?gemm, or the builtin blocked GEMM when built with EMBER_BLAS=builtin. CUDA:
// cuBLAS SGEMM on `stream`, exact fp32 unless TF32 is allowed.
// β = 0 means C is not read (NaN in C does not propagate), as in BLAS.
//
// Note [f32 GEMM on AVX-512]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where cpuid says AVX512F (and EMBER_NO_AVX512 is unset), every CPU f32 GEMM runs in ember's own
// kernel (kernels/cpu/gemm_f32.cpp), not OpenBLAS's. Why: OpenBLAS picks its AVX-512 kernels only
// on CPU models it knows, and sites pin older tables where its own pick misbehaves (this Zen 5
// machine's environment forces Haswell's AVX2 kernels), while the dense layers' products are most
// of an MLP's step. And the bits: each element of C is one sum in one order,
//     s = 0;  for p = 0 … k−1:  s = fma(op(A)[i][p], op(B)[p][j], s)
//     C[i][j] = β = 0 ? α·s : fma(β, C[i][j], α·s)          (each operation rounded to f32)
// the same on every AVX512F CPU, at any thread count and however C is cut into pieces
// (tests/kernels/test_gemm_f32.cpp compares it bit for bit with this loop in plain C++). Blocks
// of 8 rows × 32 columns of C are summed in 16 registers; op(B) is packed into panels of 16
// columns where it is transposed, or read by 4 blocks of rows and more and too large for L1, else
// read as stored; op(A) is read as stored, or packed where it is transposed. A product deeper than
// 384 runs in blocks of k, each a pass over all of C's tiles, the sums waiting between blocks in
// C (or, where β ≠ 0, in scratch) as they stand: the chain of FMAs above is unbroken, so the bits
// are the same. A bias (gemm_bias) is added as the sums are stored: C = α·s + bias[j].
#pragma once

#include <string>

#include "base/dtype.h"
#include "kernels/common.h"

namespace ember::kernels {
enum class Transpose : std::uint8_t { no, yes };
}

namespace ember::kernels::cpu {

template <class T>
void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);
// A product small enough to sit in cache (the fused attention's tiles, Note [fused attention]), run
// whole on the calling thread: the same bits as gemm(), without its dispatch, which cost the ViT's
// attention a tenth or more of its time over 50 × 50 × 16 products — no parallel split, no clock
// (its time is not in gemm_seconds()), and a transposed A read in place rather than packed.
template <class T>
void gemm_small(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);
// `batch` independent products: C_i = op(A_i)·op(B_i) with A_i = a + i·stride_a (B_i, C_i likewise),
// dense rows of lda, ldb, ldc. The batch runs in parallel when the products are large enough in all
// (kGemmProductsPerPiece); each product is whole on one thread, so the bits do not depend on it.
template <class T>
void gemm_batched(Transpose ta, Transpose tb, std::size_t batch, std::size_t m, std::size_t n, std::size_t k,
                  const T* a, std::size_t lda, std::size_t stride_a, const T* b, std::size_t ldb, std::size_t stride_b,
                  T* c, std::size_t ldc, std::size_t stride_c);
// C = op(A)·op(B) + bias, bias [n] added to every row: a linear layer's forward. The bits of gemm()
// with α = β = 1 over a C whose rows hold the bias (each element s + bias[j], rounded once), which is
// what runs where the kernel below does not; on AVX512F the bias is added as the sums are stored.
template <class T>
void gemm_bias(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda,
               const T* b, std::size_t ldb, const T* bias, T* c, std::size_t ldc);
// The f32 kernel of Note [f32 GEMM on AVX-512], for a CPU with AVX512F (cpu_has_avx512f()) and
// k > 0; gemm() calls it there. With a bias (β = 0 then), C = α·s + bias[j].
void gemm_f32_avx512(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                     const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                     std::size_t ldc, const float* bias = nullptr);
// gemm_small's f32 kernel, on the calling thread, for the same CPUs and k > 0.
void gemm_f32_avx512_small(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                           std::size_t ldc);
// The library's GEMM (OpenBLAS, or the builtin one), cut as Note [parallel GEMM] says: what gemm()
// runs for f64, and for f32 on a CPU without AVX512F; public so that benchmarks can compare.
template <class T>
void gemm_library(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                  std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);
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
// What runs the products: blas_core(), or on a CPU with AVX512F "ember avx512 for f32, " and
// OpenBLAS's table (or "builtin") for f64.
std::string gemm_kernels();
// Seconds this thread has spent inside gemm() since it started (ember::cpu_gemm_seconds). Two
// clock reads per call, ~40 ns against the microseconds of even the smallest GEMM a layer makes.
double gemm_seconds();

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
          std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc, cudaStream_t stream);
// The batched product of cpu::gemm_batched: one cublasSgemmStridedBatched call on `stream`.
void gemm_batched(Transpose ta, Transpose tb, std::size_t batch, std::size_t m, std::size_t n, std::size_t k,
                  const float* a, std::size_t lda, std::size_t stride_a, const float* b, std::size_t ldb,
                  std::size_t stride_b, float* c, std::size_t ldc, std::size_t stride_c, cudaStream_t stream);
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
