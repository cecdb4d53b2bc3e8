// ember's f32 GEMM for CPUs with AVX512F (Note [f32 GEMM on AVX-512] in kernels/gemm.h).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/cpu/transpose_avx512.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {
namespace {

// Rows of C held in registers: 8 rows × 2 panels of 16 columns are 16 accumulators, enough FMAs
// in flight to cover their latency on both FMA pipes.
constexpr std::size_t kRows = 8;
constexpr std::size_t kPanel = 16;  // columns of one panel (one register of f32)
// B as stored is read in place by up to 3 blocks of rows, and packed (per chunk of columns) for 4
// and more: packing costs a pass over B, and saves each block a strided walk through B's rows.
// Measured at 1 thread: 512×784×128 from A transposed, 193–199 GFLOP/s in place, 228–231 packed;
// 32×784×128 (4 blocks, `bench_kernels --filter ^gemm$`, operands not in cache) 27–29% of the
// ceiling in place, 47–53% packed; 10×256×128 (2 blocks) 190 in place, 120 packed.
constexpr std::size_t kMinRowBlocksPacking = 4;

__mmask16 columns_mask(std::size_t columns) {
  return static_cast<__mmask16>(columns >= kPanel ? 0xffffu : (1u << columns) - 1u);
}

// C[Rows × up to 32 columns] (`Panels` 1 or 2 panels, masked at n's edge). op(A)'s rows start at
// `a`: row r, column p at a[r·lda + p], or (TransA, A stored [k, m]) a[p·lda + r]. Panel q's row p
// at b[q] + p·ldb: B as stored, or packed with ldb = 16. The loops over rows and panels are
// unrolled by pragma: left to itself GCC 12 kept `acc` in memory too and stored all 16 registers
// on every step of p (80 GFLOP/s on the MLP's shapes, against 230 unrolled).
template <std::size_t Rows, bool TransA, std::size_t Panels>
__attribute__((target("avx512f"))) void tile(const float* a, std::size_t lda, std::size_t k,
                                             std::array<const float*, 2> b, std::size_t ldb, float* c, std::size_t ldc,
                                             std::array<__mmask16, 2> mask, float alpha, float beta) {
  __m512 acc[Rows][Panels];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < Rows; ++r)
#pragma GCC unroll 2
    for (std::size_t q = 0; q < Panels; ++q) acc[r][q] = _mm512_setzero_ps();
  const __mmask16 mask0 = mask[0], mask1 = mask[1];
  for (std::size_t p = 0; p < k; ++p) {
    const __m512 v0 = _mm512_maskz_loadu_ps(mask0, b[0] + p * ldb);
    const __m512 v1 = Panels == 2 ? _mm512_maskz_loadu_ps(mask1, b[1] + p * ldb) : v0;
#pragma GCC unroll 16
    for (std::size_t r = 0; r < Rows; ++r) {
      const __m512 x = _mm512_set1_ps(TransA ? a[p * lda + r] : a[r * lda + p]);
      acc[r][0] = _mm512_fmadd_ps(x, v0, acc[r][0]);
      if constexpr (Panels == 2) acc[r][1] = _mm512_fmadd_ps(x, v1, acc[r][1]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
  for (std::size_t r = 0; r < Rows; ++r)
#pragma GCC unroll 2
    for (std::size_t q = 0; q < Panels; ++q) {
      float* out = c + r * ldc + q * kPanel;
      const __mmask16 m = q == 0 ? mask0 : mask1;
      __m512 result = _mm512_mul_ps(scale, acc[r][q]);
      if (beta != 0.0f)  // β = 0: C is not read
        result = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m, out), result);
      _mm512_mask_storeu_ps(out, m, result);
    }
}

// One block of Rows rows of C across `width` columns, 32 at a time. `panel_step`: from a panel's
// first column to the next panel's (16 as stored, 16·k packed).
template <std::size_t Rows, bool TransA>
void row_block(const float* a, std::size_t lda, std::size_t k, const float* b, std::size_t ldb, std::size_t panel_step,
               std::size_t width, float* c, std::size_t ldc, float alpha, float beta) {
  for (std::size_t j = 0; j < width; j += 2 * kPanel) {
    const float* b0 = b + (j / kPanel) * panel_step;
    const std::array<__mmask16, 2> mask{columns_mask(width - j),
                                        columns_mask(width > j + kPanel ? width - j - kPanel : 0)};
    if (mask[1] != 0)
      tile<Rows, TransA, 2>(a, lda, k, {b0, b0 + panel_step}, ldb, c + j, ldc, mask, alpha, beta);
    else
      tile<Rows, TransA, 1>(a, lda, k, {b0, nullptr}, ldb, c + j, ldc, mask, alpha, beta);
  }
}

using RowBlock = void (*)(const float*, std::size_t, std::size_t, const float*, std::size_t, std::size_t, std::size_t,
                          float*, std::size_t, float, float);
template <bool TransA>
constexpr auto kRowBlocks = []<std::size_t... R>(std::index_sequence<R...>) {
  return std::array<RowBlock, kRows + 1>{nullptr, row_block<R + 1, TransA>...};
}
(std::make_index_sequence<kRows>());

// op(B)'s columns [j0, j0 + width) of B stored [n, k] (transposed), packed as panels of 16
// columns, each k rows of 16 values (zeros past n): full 16×16 blocks by register transposes.
__attribute__((target("avx512f"))) void pack_transposed(const float* b, std::size_t ldb, std::size_t k, std::size_t j0,
                                                        std::size_t width, float* packed) {
  for (std::size_t j = 0; j < width; j += kPanel) {
    const std::size_t columns = std::min(kPanel, width - j);
    const float* rows = b + (j0 + j) * ldb;
    float* out = packed + (j / kPanel) * kPanel * k;
    std::size_t p = 0;
    if (columns == kPanel)
      for (; p + kPanel <= k; p += kPanel)
        transpose_16x16_words(rows + p, ldb * sizeof(float), reinterpret_cast<std::uint32_t*>(out + p * kPanel));
    for (; p < k; ++p)
      for (std::size_t t = 0; t < kPanel; ++t) out[p * kPanel + t] = t < columns ? rows[t * ldb + p] : 0.0f;
  }
}

// op(B)'s columns [j0, j0 + width) of B stored [k, n], packed as above: each panel's rows copied.
__attribute__((target("avx512f"))) void pack_stored(const float* b, std::size_t ldb, std::size_t k, std::size_t j0,
                                                    std::size_t width, float* packed) {
  for (std::size_t j = 0; j < width; j += kPanel) {
    const __mmask16 mask = columns_mask(width - j);
    float* out = packed + (j / kPanel) * kPanel * k;
    for (std::size_t p = 0; p < k; ++p)
      _mm512_storeu_ps(out + p * kPanel, _mm512_maskz_loadu_ps(mask, b + p * ldb + j0 + j));
  }
}

// Columns of C in chunks whose share of B (k rows) stays in a core's L2 cache while every block of
// rows passes over it.
std::size_t column_chunk(std::size_t k) {
  return std::max<std::size_t>(2 * kPanel, 256 * 1024 / (sizeof(float) * k) / (2 * kPanel) * (2 * kPanel));
}

}  // namespace

// Tiles (a chunk of columns × a block of kRows rows), chunk by chunk, are the parallel pieces; where
// B is packed, a thread packs a chunk of it when it starts on that chunk. Each element of C is the sum the note
// gives whoever computes it.
void gemm_f32_avx512(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                     const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                     std::size_t ldc) {
  const std::size_t chunk = column_chunk(k), chunks = (n + chunk - 1) / chunk, row_blocks = (m + kRows - 1) / kRows;
  const bool packs = tb == Transpose::yes || row_blocks >= kMinRowBlocksPacking;
  const auto& blocks = ta == Transpose::yes ? kRowBlocks<true> : kRowBlocks<false>;
  const double tile_products = static_cast<double>(kRows * std::min(chunk, n)) * static_cast<double>(k);
  const auto grain = static_cast<std::size_t>(std::max(1.0, kGemmProductsPerPiece / tile_products));
  parallel_for(
      chunks * row_blocks, grain,
      [&](std::size_t first, std::size_t last) {
        float* packed =
            packs ? thread_scratch<float>(1, (std::min(chunk, n) + kPanel - 1) / kPanel * kPanel * k) : nullptr;
        std::size_t packed_chunk = chunks;  // none yet
        for (std::size_t t = first; t < last; ++t) {
          const std::size_t chunk_index = t / row_blocks, i = t % row_blocks * kRows, j = chunk_index * chunk;
          const std::size_t width = std::min(chunk, n - j), rows = std::min(kRows, m - i);
          if (packs && packed_chunk != chunk_index) {
            if (tb == Transpose::yes)
              pack_transposed(b, ldb, k, j, width, packed);
            else
              pack_stored(b, ldb, k, j, width, packed);
            packed_chunk = chunk_index;
          }
          const float* a_rows = ta == Transpose::yes ? a + i : a + i * lda;
          if (packs)
            blocks[rows](a_rows, lda, k, packed, kPanel, kPanel * k, width, c + i * ldc + j, ldc, alpha, beta);
          else
            blocks[rows](a_rows, lda, k, b + j, ldb, kPanel, width, c + i * ldc + j, ldc, alpha, beta);
        }
      },
      1);
}

}  // namespace ember::kernels::cpu
