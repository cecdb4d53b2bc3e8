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
// ceiling in place, 47–53% packed; 10×256×128 (2 blocks) 190 in place, 120 packed. A chunk of B
// that fits in L1 (kInPlaceBytes) is read in place by any number of blocks: the attention's
// per-head products (V of 50 × 16) spent more on packing it than on reading it.
constexpr std::size_t kMinRowBlocksPacking = 4;
constexpr std::size_t kInPlaceBytes = 16 * 1024;
// A product deeper than this runs in blocks of k of equal depth, each a pass over every tile, so
// that the block of A the tiles read stays in cache: A read transposed walks k rows of A with a
// stride of m floats, touching a cache line per row and 32 bytes of it (192×64×3200, the ViT's
// weight gradient: 39 GFLOP/s in one block, 75 in blocks, 109 with A packed as well).
constexpr std::size_t kDepth = 384;

__mmask16 columns_mask(std::size_t columns) {
  return static_cast<__mmask16>(columns >= kPanel ? 0xffffu : (1u << columns) - 1u);
}

// Where a tile's sums start and where they go: a product deeper than kDepth runs in blocks of k
// (Note [f32 GEMM on AVX-512]), and between blocks each sum waits, as it stands, in `sums` (row
// stride `ld`): C itself when β = 0, else a scratch matrix. Storing and reloading a float is exact,
// so the sum is the one unbroken chain of FMAs the note gives.
struct Sums {
  float* at = nullptr;  // the tile's first sum
  std::size_t ld = 0;
  bool first = true;  // sums start at 0 (else they are read from `at`)
  bool last = true;   // C = α·s + β·C (else s is stored at `at`)
};

// What a tile's last block of k writes: C = α·s + β·C, or with a bias (β = 0 then) C = α·s + bias[j].
struct Epilogue {
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;  // at the tile's first column
};

// C[Rows × up to 32 columns] (`Panels` 1 or 2 panels, masked at n's edge), columns [j, j + 32) of
// the product that `epilogue` and `sums` describe. op(A)'s rows start at `a`: row r, column p at
// a[r·lda + p], or (TransA, A stored [k, m]) a[p·lda + r]. Panel q's row p at b[q] + p·ldb: B as
// stored, or packed with ldb = 16. The loops over rows and panels are
// unrolled by pragma: left to itself GCC 12 kept `acc` in memory too and stored all 16 registers
// on every step of p (80 GFLOP/s on the MLP's shapes, against 230 unrolled). The epilogue and the
// sums go by reference, whole, with the column `j` beside them: a copy (by value, or one made to
// move its pointers to column j) read their fields, stored one by one, back by 16-byte loads, which
// stalled the store forwarding on every call (5% of the ViT's step, in its attention's small tiles;
// the copy in row_block, 8% of the attention's time). `Full`: 32 whole columns, B's rows loaded
// without masks; with them GCC kept both masks on the stack and reloaded them on every step of p
// (the fused attention's 128×64×128 products in cache, 1 thread: 123–134 GFLOP/s masked, 140–158
// unmasked; its forward at L 1,024 a tenth faster).
template <std::size_t Rows, bool TransA, std::size_t Panels, bool Full>
__attribute__((target("avx512f"))) void tile(const float* a, std::size_t lda, std::size_t k,
                                             std::array<const float*, 2> b, std::size_t ldb, float* c, std::size_t ldc,
                                             std::array<__mmask16, 2> mask, const Epilogue& epilogue, const Sums& sums,
                                             std::size_t j) {
  const __mmask16 mask0 = mask[0], mask1 = mask[1];
  float* const sums_at = sums.at + j;
  __m512 acc[Rows][Panels];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < Rows; ++r)
#pragma GCC unroll 2
    for (std::size_t q = 0; q < Panels; ++q)
      acc[r][q] = sums.first ? _mm512_setzero_ps()
                             : _mm512_maskz_loadu_ps(q == 0 ? mask0 : mask1, sums_at + r * sums.ld + q * kPanel);
  for (std::size_t p = 0; p < k; ++p) {
    const __m512 v0 = Full ? _mm512_loadu_ps(b[0] + p * ldb) : _mm512_maskz_loadu_ps(mask0, b[0] + p * ldb);
    const __m512 v1 =
        Panels == 2 ? (Full ? _mm512_loadu_ps(b[1] + p * ldb) : _mm512_maskz_loadu_ps(mask1, b[1] + p * ldb)) : v0;
#pragma GCC unroll 16
    for (std::size_t r = 0; r < Rows; ++r) {
      const __m512 x = _mm512_set1_ps(TransA ? a[p * lda + r] : a[r * lda + p]);
      acc[r][0] = _mm512_fmadd_ps(x, v0, acc[r][0]);
      if constexpr (Panels == 2) acc[r][1] = _mm512_fmadd_ps(x, v1, acc[r][1]);
    }
  }
  const __m512 scale = _mm512_set1_ps(epilogue.alpha);
#pragma GCC unroll 16
  for (std::size_t r = 0; r < Rows; ++r)
#pragma GCC unroll 2
    for (std::size_t q = 0; q < Panels; ++q) {
      const __mmask16 m = q == 0 ? mask0 : mask1;
      if (!sums.last) {
        _mm512_mask_storeu_ps(sums_at + r * sums.ld + q * kPanel, m, acc[r][q]);
        continue;
      }
      float* out = c + r * ldc + q * kPanel;
      __m512 result = _mm512_mul_ps(scale, acc[r][q]);
      if (epilogue.beta != 0.0f)  // β = 0: C is not read
        result = _mm512_fmadd_ps(_mm512_set1_ps(epilogue.beta), _mm512_maskz_loadu_ps(m, out), result);
      if (epilogue.bias != nullptr)
        result = _mm512_add_ps(result, _mm512_maskz_loadu_ps(m, epilogue.bias + j + q * kPanel));
      _mm512_mask_storeu_ps(out, m, result);
    }
}

// One block of Rows rows of C across `width` columns, 32 at a time. `panel_step`: from a panel's
// first column to the next panel's (16 as stored, 16·k packed).
template <std::size_t Rows, bool TransA>
void row_block(const float* a, std::size_t lda, std::size_t k, const float* b, std::size_t ldb, std::size_t panel_step,
               std::size_t width, float* c, std::size_t ldc, const Epilogue& epilogue, const Sums& sums) {
  for (std::size_t j = 0; j < width; j += 2 * kPanel) {
    const float* b0 = b + (j / kPanel) * panel_step;
    const std::array<__mmask16, 2> mask{columns_mask(width - j),
                                        columns_mask(width > j + kPanel ? width - j - kPanel : 0)};
    if (mask[1] == 0xffff)
      tile<Rows, TransA, 2, true>(a, lda, k, {b0, b0 + panel_step}, ldb, c + j, ldc, mask, epilogue, sums, j);
    else if (mask[1] != 0)
      tile<Rows, TransA, 2, false>(a, lda, k, {b0, b0 + panel_step}, ldb, c + j, ldc, mask, epilogue, sums, j);
    else
      tile<Rows, TransA, 1, false>(a, lda, k, {b0, nullptr}, ldb, c + j, ldc, mask, epilogue, sums, j);
  }
}

using RowBlock = void (*)(const float*, std::size_t, std::size_t, const float*, std::size_t, std::size_t, std::size_t,
                          float*, std::size_t, const Epilogue&, const Sums&);
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

// op(A)'s rows [i0, i0 + kRows·blocks) of A stored [k, m] (transposed), packed as blocks of kRows
// rows, each k steps of kRows values (zeros past m): what a tile reads with lda = kRows. The tiles
// then read A in order, not a cache line per step of k, and A's rows are read once, in a stream.
__attribute__((target("avx512f"))) void pack_a_transposed(const float* a, std::size_t lda, std::size_t m, std::size_t k,
                                                          std::size_t i0, std::size_t blocks, float* packed) {
  for (std::size_t p = 0; p < k; ++p) {
    const float* row = a + p * lda;
    for (std::size_t block = 0; block < blocks; ++block) {
      const std::size_t i = i0 + block * kRows;
      float* out = packed + (block * k + p) * kRows;
      if (i + kRows <= m) {  // 8 floats by AVX moves: AVX512F, the kernel's one requirement, has no masked ones
        _mm256_storeu_ps(out, _mm256_loadu_ps(row + i));
        continue;
      }
      for (std::size_t r = 0; r < kRows; ++r) out[r] = i + r < m ? row[i + r] : 0.0f;  // zeros past m
    }
  }
}

// Columns of C in chunks whose share of B (k rows) stays in a core's L2 cache while every block of
// rows passes over it.
std::size_t column_chunk(std::size_t k) {
  return std::max<std::size_t>(2 * kPanel, 256 * 1024 / (sizeof(float) * k) / (2 * kPanel) * (2 * kPanel));
}

}  // namespace

// Tiles (a chunk of columns × a block of kRows rows), chunk by chunk, are the parallel pieces, each
// thread's the same in every block of k; where B is packed, a thread packs a chunk of it (in the
// block of k at hand) when it starts on that chunk. Each element of C is the sum the note gives
// whoever computes it.
void gemm_f32_avx512(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                     const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                     std::size_t ldc, const float* bias) {
  const std::size_t depth_blocks = (k + kDepth - 1) / kDepth, depth = (k + depth_blocks - 1) / depth_blocks;
  const std::size_t chunk = column_chunk(depth), chunks = (n + chunk - 1) / chunk, row_blocks = (m + kRows - 1) / kRows;
  const bool packs = tb == Transpose::yes ||
                     (row_blocks >= kMinRowBlocksPacking && depth * std::min(chunk, n) * sizeof(float) > kInPlaceBytes);
  const bool packs_a = ta == Transpose::yes;
  const auto& blocks = ta == Transpose::yes ? kRowBlocks<true> : kRowBlocks<false>;
  // Sums between blocks of k: in C where C's own values are not needed after (β = 0).
  const bool in_c = beta == 0.0f || depth_blocks == 1;
  float* const sums = in_c ? c : thread_scratch<float>(kGemmSumsSlot, m * n);
  const std::size_t ld_sums = in_c ? ldc : n;
  const double tile_products = static_cast<double>(kRows * std::min(chunk, n)) * static_cast<double>(k);
  const auto grain = static_cast<std::size_t>(std::max(1.0, kGemmProductsPerPiece / tile_products));
  parallel_for(
      chunks * row_blocks, grain,
      [&](std::size_t first, std::size_t last) {
        float* packed =
            packs ? thread_scratch<float>(kGemmPackingSlot, (std::min(chunk, n) + kPanel - 1) / kPanel * kPanel * depth)
                  : nullptr;
        // The blocks of rows this thread's tiles cover: all, or a run within one chunk.
        const bool all_rows = last - first >= row_blocks || first / row_blocks != (last - 1) / row_blocks;
        const std::size_t first_rows = all_rows ? 0 : first % row_blocks;
        const std::size_t row_count = all_rows ? row_blocks : (last - 1) % row_blocks + 1 - first_rows;
        float* packed_a = packs_a ? thread_scratch<float>(kGemmPackingASlot, row_count * kRows * depth) : nullptr;
        for (std::size_t p0 = 0; p0 < k; p0 += depth) {
          const std::size_t kd = std::min(depth, k - p0);
          const float* a_block = ta == Transpose::yes ? a + p0 * lda : a + p0;
          const float* b_block = tb == Transpose::yes ? b + p0 : b + p0 * ldb;
          if (packs_a) pack_a_transposed(a_block, lda, m, kd, first_rows * kRows, row_count, packed_a);
          std::size_t packed_chunk = chunks;  // none yet
          for (std::size_t t = first; t < last; ++t) {
            const std::size_t chunk_index = t / row_blocks, i = t % row_blocks * kRows, j = chunk_index * chunk;
            const std::size_t width = std::min(chunk, n - j), rows = std::min(kRows, m - i);
            if (packs && packed_chunk != chunk_index) {
              if (tb == Transpose::yes)
                pack_transposed(b_block, ldb, kd, j, width, packed);
              else
                pack_stored(b_block, ldb, kd, j, width, packed);
              packed_chunk = chunk_index;
            }
            const float* a_rows = packs_a ? packed_a + (i / kRows - first_rows) * kRows * kd : a_block + i * lda;
            const std::size_t a_ld = packs_a ? kRows : lda;
            const Sums at{sums + i * ld_sums + j, ld_sums, p0 == 0, p0 + kd == k};
            const Epilogue epilogue{alpha, beta, bias != nullptr ? bias + j : nullptr};
            if (packs)
              blocks[rows](a_rows, a_ld, kd, packed, kPanel, kPanel * kd, width, c + i * ldc + j, ldc, epilogue, at);
            else
              blocks[rows](a_rows, a_ld, kd, b_block + j, ldb, kPanel, width, c + i * ldc + j, ldc, epilogue, at);
          }
        }
      },
      1);
}

// The same tiles, in order on this thread: op(B) packed where it is transposed (its panels are what
// the tiles read), as stored otherwise; op(A) as stored either way, a transposed A's 8 rows of a
// step of k being one run of 32 bytes in a block that stays in cache.
void gemm_f32_avx512_small(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                           std::size_t ldc) {
  const bool packs = tb == Transpose::yes;
  float* packed = packs ? thread_scratch<float>(kGemmPackingSlot, (n + kPanel - 1) / kPanel * kPanel * k) : nullptr;
  if (packs) pack_transposed(b, ldb, k, 0, n, packed);
  const auto& blocks = ta == Transpose::yes ? kRowBlocks<true> : kRowBlocks<false>;
  const Epilogue epilogue{alpha, beta, nullptr};
  for (std::size_t i = 0; i < m; i += kRows) {
    const float* a_rows = ta == Transpose::yes ? a + i : a + i * lda;
    const Sums sums{c + i * ldc, ldc, true, true};
    if (packs)
      blocks[std::min(kRows, m - i)](a_rows, lda, k, packed, kPanel, kPanel * k, n, c + i * ldc, ldc, epilogue, sums);
    else
      blocks[std::min(kRows, m - i)](a_rows, lda, k, b, ldb, kPanel, n, c + i * ldc, ldc, epilogue, sums);
  }
}

}  // namespace ember::kernels::cpu
