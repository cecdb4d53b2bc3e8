// CPU GEMM: f32 on AVX512F in ember's kernel (Note [f32 GEMM on AVX-512] in kernels/gemm.h); the
// rest in OpenBLAS when ember is built with it, else a builtin blocked GEMM (slow, correct).
//
// Note [parallel GEMM]
// ~~~~~~~~~~~~~~~~~~~~
// OpenBLAS runs on one thread of its own (Note [CPU threads]); a GEMM large enough is cut by ember
// into blocks that run on the pool, each an OpenBLAS call of its own. OpenBLAS's results depend on
// how a product is cut (its edge kernels sum k in other orders), so the blocks are a function of
// the shape alone, and one thread runs the same blocks in turn: the same bits at any thread count.
// - Blocks of C's longer side (rows or columns, whole multiples of 16), each of at least
//   kGemmProductsPerPiece multiply-adds (kernels/parallel.h), at most kMaxBlocks: each block
//   repacks the operand they share, so this cut is taken only while the repacking stays under 1/32
//   of the arithmetic.
// - Otherwise, where k is long (the CNN's dense layer: 64×128 from k = 9216), blocks of k: each
//   computes a partial C, and the partials are added in block order afterwards.
// - Otherwise one call.
#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

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

constexpr std::size_t kMaxBlocks = 8;

// Blocks along `side` elements, each of at least kGemmProductsPerPiece multiply-adds and `minimum`
// long.
std::size_t block_count(std::size_t side, double products_per_element, std::size_t minimum) {
  const double by_work = products_per_element * static_cast<double>(side) / kGemmProductsPerPiece;
  const std::size_t by_side = side / minimum;
  return std::max<std::size_t>(1, std::min({kMaxBlocks, by_side, static_cast<std::size_t>(by_work)}));
}
// Where block `block` of `blocks` starts: i·side/blocks rounded to the nearest multiple of 16, so
// that the blocks differ by at most 16 and there are exactly `blocks` of them (784 columns in 8:
// 96 or 112 each; equal lengths rounded up to 16 made 7 blocks of 112, 4 and 3 per thread at 2).
std::size_t block_start(std::size_t block, std::size_t side, std::size_t blocks) {
  if (block >= blocks) return side;
  return std::min(side, (block * side + blocks * 8) / (blocks * 16) * 16);
}

template <class T>
void split_gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  const double products = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const bool by_rows = m >= n;
  const std::size_t side = by_rows ? m : n;
  const std::size_t blocks = block_count(side, products / static_cast<double>(side), 16);
  const double repacked =
      static_cast<double>(blocks - 1) * static_cast<double>(k) * static_cast<double>(by_rows ? n : m);
  if (blocks > 1 && repacked * 32 <= products) {
    parallel_parts(blocks, [&](std::size_t first_block, std::size_t last_block) {
      for (std::size_t block = first_block; block < last_block; ++block) {  // one call each, whoever runs it
        const std::size_t first = block_start(block, side, blocks), last = block_start(block + 1, side, blocks);
        if (by_rows) {
          const T* a_rows = ta == Transpose::no ? a + first * lda : a + first;
          library_gemm(ta, tb, last - first, n, k, alpha, a_rows, lda, b, ldb, beta, c + first * ldc, ldc);
        } else {
          const T* b_columns = tb == Transpose::no ? b + first : b + first * ldb;
          library_gemm(ta, tb, m, last - first, k, alpha, a, lda, b_columns, ldb, beta, c + first, ldc);
        }
      }
    });
    return;
  }
  const std::size_t k_blocks = block_count(k, static_cast<double>(m) * static_cast<double>(n), 256);
  if (k_blocks < 2) return library_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // Partial products of blocks of k, in the calling thread's scratch, added to C in block order.
  T* partials = thread_scratch<T>(kGemmSumsSlot, k_blocks * m * n);
  parallel_parts(k_blocks, [&](std::size_t first_block, std::size_t last_block) {
    for (std::size_t block = first_block; block < last_block; ++block) {
      const std::size_t first = block_start(block, k, k_blocks), depth = block_start(block + 1, k, k_blocks) - first;
      const T* a_block = ta == Transpose::no ? a + first : a + first * lda;
      const T* b_block = tb == Transpose::no ? b + first * ldb : b + first;
      library_gemm(ta, tb, m, n, depth, T(1), a_block, lda, b_block, ldb, T(0), partials + block * m * n, n);
    }
  });
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      T sum = partials[i * n + j];
      for (std::size_t block = 1; block < k_blocks; ++block) sum += partials[(block * m + i) * n + j];
      T* out = c + i * ldc + j;
      *out = beta == T(0) ? alpha * sum : alpha * sum + beta * *out;
    }
}
}  // namespace

template <class T>
void gemm_library(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                  std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  hold_library_threads();
  // BLAS rejects k = 0 with lda = 0 in some builds; the builtin path just scales C by beta.
  if (k == 0) return gemm_builtin(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  split_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {
// Runs `product` and adds its time to this thread's time in GEMMs.
template <class Product>
void timed(Product&& product) {
  const auto start = std::chrono::steady_clock::now();
  product();
  seconds_in_gemm += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

template <class T>
void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  timed([&] {
    if constexpr (std::is_same_v<T, float>)
      if (m > 0 && n > 0 && k > 0 && cpu_has_avx512f())  // Note [f32 GEMM on AVX-512]
        return gemm_f32_avx512(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    gemm_library(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  });
}

template <class T>
void gemm_bias(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda,
               const T* b, std::size_t ldb, const T* bias, T* c, std::size_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (m > 0 && n > 0 && k > 0 && cpu_has_avx512f())
      return timed([&] { gemm_f32_avx512(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, bias); });
  for (std::size_t i = 0; i < m; ++i) std::copy(bias, bias + n, c + i * ldc);
  gemm<T>(ta, tb, m, n, k, T(1), a, lda, b, ldb, T(1), c, ldc);
}

template <class T>
void gemm_small(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (m > 0 && n > 0 && k > 0 && cpu_has_avx512f())
      return gemm_f32_avx512_small(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  gemm<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm_batched(Transpose ta, Transpose tb, std::size_t batch, std::size_t m, std::size_t n, std::size_t k,
                  const T* a, std::size_t lda, std::size_t stride_a, const T* b, std::size_t ldb, std::size_t stride_b,
                  T* c, std::size_t ldc, std::size_t stride_c) {
  const double products = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const std::size_t pieces =
      std::clamp<std::size_t>(static_cast<std::size_t>(static_cast<double>(batch) * products / kGemmProductsPerPiece),
                              1, batch > 0 ? batch : 1);
  parallel_parts(pieces, [&](std::size_t first, std::size_t last) {
    for (std::size_t i = first * batch / pieces; i < last * batch / pieces; ++i)
      gemm<T>(ta, tb, m, n, k, T(1), a + i * stride_a, lda, b + i * stride_b, ldb, T(0), c + i * stride_c, ldc);
  });
}

double gemm_seconds() { return seconds_in_gemm; }

std::string gemm_kernels() {
  if (!cpu_has_avx512f()) return blas_core();
  const std::string library = std::string_view(blas_name()) == "builtin" ? "builtin" : "openblas " + blas_core();
  return "ember avx512 for f32, " + library + " for f64";
}

template void gemm<float>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t,
                          const float*, std::size_t, float, float*, std::size_t);
template void gemm<double>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, double, const double*,
                           std::size_t, const double*, std::size_t, double, double*, std::size_t);
template void gemm_bias<float>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, const float*, std::size_t,
                               const float*, std::size_t, const float*, float*, std::size_t);
template void gemm_bias<double>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, const double*, std::size_t,
                                const double*, std::size_t, const double*, double*, std::size_t);
template void gemm_small<float>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, float, const float*,
                                std::size_t, const float*, std::size_t, float, float*, std::size_t);
template void gemm_small<double>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, double, const double*,
                                 std::size_t, const double*, std::size_t, double, double*, std::size_t);
template void gemm_batched<float>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, std::size_t,
                                  const float*, std::size_t, std::size_t, const float*, std::size_t, std::size_t,
                                  float*, std::size_t, std::size_t);
template void gemm_batched<double>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, std::size_t,
                                   const double*, std::size_t, std::size_t, const double*, std::size_t, std::size_t,
                                   double*, std::size_t, std::size_t);
template void gemm_library<float>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, float, const float*,
                                  std::size_t, const float*, std::size_t, float, float*, std::size_t);
template void gemm_library<double>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, double, const double*,
                                   std::size_t, const double*, std::size_t, double, double*, std::size_t);
template void gemm_builtin<float>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, float, const float*,
                                  std::size_t, const float*, std::size_t, float, float*, std::size_t);
template void gemm_builtin<double>(Transpose, Transpose, std::size_t, std::size_t, std::size_t, double, const double*,
                                   std::size_t, const double*, std::size_t, double, double*, std::size_t);

}  // namespace ember::kernels::cpu
