// CPU GEMM: OpenBLAS when ember is built with it, else a builtin blocked GEMM (slow, correct).
#include <algorithm>
#include <chrono>
#include <vector>

#include "core/base/config.h"
#include "core/base/error.h"
#include "kernels/gemm.h"

#if EMBER_WITH_OPENBLAS
#include <cblas.h>
#endif

namespace ember::kernels::cpu {

template <class T>
void gemm_builtin(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                  std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : c[i * ldc + j] * beta;
  if (k == 0 || alpha == T(0)) return;
  auto a_at = [&](std::size_t i, std::size_t p) { return ta == Transpose::no ? a[i * lda + p] : a[p * lda + i]; };
  auto b_at = [&](std::size_t p, std::size_t j) { return tb == Transpose::no ? b[p * ldb + j] : b[j * ldb + p]; };
  // Pack a kc×nc block of op(B) contiguously so the innermost loop streams through it whatever
  // the transposes; the loop order i-p-j then vectorizes over j.
  constexpr std::size_t kc = 256, nc = 512;
  std::vector<T> packed(kc * nc);
  for (std::size_t p0 = 0; p0 < k; p0 += kc) {
    const std::size_t pk = std::min(kc, k - p0);
    for (std::size_t j0 = 0; j0 < n; j0 += nc) {
      const std::size_t nj = std::min(nc, n - j0);
      for (std::size_t p = 0; p < pk; ++p)
        for (std::size_t j = 0; j < nj; ++j) packed[p * nj + j] = b_at(p0 + p, j0 + j);
      for (std::size_t i = 0; i < m; ++i) {
        T* crow = c + i * ldc + j0;
        for (std::size_t p = 0; p < pk; ++p) {
          const T scaled = alpha * a_at(i, p0 + p);
          const T* brow = packed.data() + p * nj;
          for (std::size_t j = 0; j < nj; ++j) crow[j] += scaled * brow[j];
        }
      }
    }
  }
}

namespace {
thread_local double seconds_in_gemm = 0;

#if EMBER_WITH_OPENBLAS
CBLAS_TRANSPOSE to_cblas(Transpose t) { return t == Transpose::no ? CblasNoTrans : CblasTrans; }
int to_int(std::size_t v) { return static_cast<int>(v); }

void library_gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                  std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), to_int(m), to_int(n), to_int(k), alpha, a, to_int(lda), b,
              to_int(ldb), beta, c, to_int(ldc));
}
void library_gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, double alpha,
                  const double* a, std::size_t lda, const double* b, std::size_t ldb, double beta, double* c,
                  std::size_t ldc) {
  cblas_dgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), to_int(m), to_int(n), to_int(k), alpha, a, to_int(lda), b,
              to_int(ldb), beta, c, to_int(ldc));
}
#else
template <class T>
void library_gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                  std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  gemm_builtin(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#endif
}  // namespace

template <class T>
void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  // BLAS rejects k = 0 with lda = 0 in some builds; the builtin path just scales C by beta.
  const auto start = std::chrono::steady_clock::now();
  if (k == 0)
    gemm_builtin(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    library_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  seconds_in_gemm += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double gemm_seconds() { return seconds_in_gemm; }

#if EMBER_WITH_OPENBLAS
void set_num_threads(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
}
int num_threads() { return openblas_get_num_threads(); }
const char* blas_name() { return "openblas"; }
#else
void set_num_threads(int) {}
int num_threads() { return 1; }
const char* blas_name() { return "builtin"; }
#endif

template void gemm<float>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t,
                          const float*, std::size_t, float, float*, std::size_t);
template void gemm<double>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, double, const double*,
                           std::size_t, const double*, std::size_t, double, double*, std::size_t);
template void gemm_builtin<float>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, float, const float*,
                                  std::size_t, const float*, std::size_t, float, float*, std::size_t);
template void gemm_builtin<double>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, double, const double*,
                                   std::size_t, const double*, std::size_t, double, double*, std::size_t);

}  // namespace ember::kernels::cpu
