// The CPU's bf16 GEMM: the scalar path and the AVX512-BF16 one (Note [bf16 GEMM paths]).
#include "kernels/gemm_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "base/error.h"
#include "kernels/cpu/transpose_avx512.h"
#include "kernels/cpu_features.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {
namespace {

// Bits of a[i][2p] and a[i][2p+1] as one 32-bit word (the low half first), 0 past column k.
std::uint32_t a_pair(const bfloat16* row, std::size_t p, std::size_t k) {
  const std::uint32_t lo = row[2 * p].bits;
  const std::uint32_t hi = 2 * p + 1 < k ? row[2 * p + 1].bits : 0u;
  return lo | (hi << 16);
}

// op(A)[i][p], A stored [m, k] or (transposed) [k, m].
struct AView {
  const bfloat16* a;
  std::size_t lda;
  bool transposed;
  bfloat16 at(std::size_t i, std::size_t p) const { return transposed ? a[p * lda + i] : a[i * lda + p]; }
};

// op(B)[p][j], B stored [k, n] or (transposed) [n, k].
struct BView {
  const bfloat16* b;
  std::size_t ldb;
  bool transposed;
  bfloat16 at(std::size_t p, std::size_t j) const { return transposed ? b[j * ldb + p] : b[p * ldb + j]; }
};

void gemm_scalar(std::size_t m, std::size_t n, std::size_t k, AView a, BView b, float* c, std::size_t ldc,
                 bool accumulate) {
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      float sum = accumulate ? c[i * ldc + j] : 0.0f;
      // VDPBF16PS's order: the odd element of each pair first, then the even one.
      for (std::size_t p = 0; 2 * p < k; ++p) {
        if (2 * p + 1 < k) sum += static_cast<float>(a.at(i, 2 * p + 1)) * static_cast<float>(b.at(2 * p + 1, j));
        sum += static_cast<float>(a.at(i, 2 * p)) * static_cast<float>(b.at(2 * p, j));
      }
      c[i * ldc + j] = sum;
    }
}

// ---- AVX512-BF16 -----------------------------------------------------------------------------
// Rows of C held in registers: 8 rows × 2 panels are 16 accumulators, enough VDPBF16PS in flight
// to cover its latency; measured on the MLP's shapes, 6 rows ran at ~330 GFLOP/s, 8 at ~410, 12
// (24 accumulators, spilled) at ~350.
constexpr std::size_t kRows = 8;
constexpr std::size_t kPanel = 16;  // columns of one packed panel (one register of f32)

// B packed for VDPBF16PS: panels of 16 columns; in each, for each pair of rows p, 32 bf16 values
// b[2p][j], b[2p+1][j] for j in the panel. Zeros past row k and column n. Each panel row is
// written whole, in order (no zero-fill of the buffer first, no index arithmetic per element), so
// the compiler vectorizes the interleave.
__attribute__((target("avx512f,avx512bw"))) void pack_b(std::size_t n, std::size_t k, BView b,
                                                        std::uint32_t* words) {  // one per (pair p, column j)
  const std::size_t pairs = (k + 1) / 2, panels = (n + kPanel - 1) / kPanel;
  for (std::size_t q = 0; q < panels; ++q) {
    const std::size_t j0 = q * kPanel, width = std::min(kPanel, n - j0);
    for (std::size_t p = 0; p < pairs; ++p) {
      std::uint32_t* out = words + (q * pairs + p) * kPanel;
      const bool odd_row = 2 * p + 1 < k;
      std::size_t t = 0;
      if (b.transposed) {
        // Stored [n, k]: b[j][2p] and b[j][2p+1] are adjacent, already the word the layout wants.
        // A full panel's 16 rows by 16 whole pairs at once is a transpose of 32-bit words.
        if (width == kPanel && p % kPanel == 0 && 2 * (p + kPanel) <= k) {
          transpose_16x16_words(b.b + j0 * b.ldb + 2 * p, b.ldb * sizeof(bfloat16), out);
          p += kPanel - 1;  // the next 15 pairs' words are written too
          continue;
        }
        for (; t < width; ++t) {
          const bfloat16* row = b.b + (j0 + t) * b.ldb + 2 * p;
          out[t] = row[0].bits | (odd_row ? static_cast<std::uint32_t>(row[1].bits) << 16 : 0u);
        }
      } else {
        // Stored [k, n]: rows 2p and 2p+1 interleaved.
        const bfloat16* even = b.b + 2 * p * b.ldb + j0;
        const bfloat16* odd = odd_row ? even + b.ldb : nullptr;
        if (odd)
          for (; t < width; ++t) out[t] = even[t].bits | static_cast<std::uint32_t>(odd[t].bits) << 16;
        else
          for (; t < width; ++t) out[t] = even[t].bits;
      }
      for (; t < kPanel; ++t) out[t] = 0;
    }
  }
}

// a[2p] and a[2p+1] as one 32-bit word, read at once (both within the row).
std::uint32_t a_word(const bfloat16* a) {
  std::uint32_t word;
  std::memcpy(&word, a, sizeof word);
  return word;
}

// op(A) as the blocks read it: word(r, p) holds op(A)[r][2p] (low half) and op(A)[r][2p+1], and
// last_word(r, p, k) the same for the last pair of an odd k, zero-padded. ARows reads A as stored
// ([m, k], row stride lda); APairs reads a transposed A whose pairs of rows were interleaved into
// words[p·ld + i] first (pack_a_pairs, zeros past row k).
struct ARows {
  const bfloat16* a;
  std::size_t lda;
  ARows from_row(std::size_t i) const { return {a + i * lda, lda}; }
  std::uint32_t word(std::size_t r, std::size_t p) const { return a_word(a + r * lda + 2 * p); }
  std::uint32_t last_word(std::size_t r, std::size_t p, std::size_t k) const { return a_pair(a + r * lda, p, k); }
};
struct APairs {
  const std::uint32_t* words;
  std::size_t ld;
  APairs from_row(std::size_t i) const { return {words + i, ld}; }
  std::uint32_t word(std::size_t r, std::size_t p) const { return words[p * ld + r]; }
  std::uint32_t last_word(std::size_t r, std::size_t p, std::size_t) const { return word(r, p); }
};

// A stored [k, m] (transposed) into APairs' layout: rows 2p and 2p+1 interleaved, as pack_b does
// with a B stored [k, n], in one pass that the compiler vectorizes.
__attribute__((target("avx512f,avx512bw"))) void pack_a_pairs(std::size_t k, std::size_t m, const bfloat16* a,
                                                              std::size_t lda, std::uint32_t* words) {
  const std::size_t pairs = (k + 1) / 2;
  for (std::size_t p = 0; p < pairs; ++p) {
    const bfloat16* even = a + 2 * p * lda;
    std::uint32_t* out = words + p * m;
    if (2 * p + 1 < k) {
      const bfloat16* odd = even + lda;
      for (std::size_t i = 0; i < m; ++i) out[i] = even[i].bits | static_cast<std::uint32_t>(odd[i].bits) << 16;
    } else {
      for (std::size_t i = 0; i < m; ++i) out[i] = even[i].bits;
    }
  }
}

// 16 f32 sums rounded to bf16 by the cast's own formula (half_bits::bf16_from_f32, Note [half
// conversions]: NaN first, then ties to even) in integer lanes, so the bits are those of the f32
// result cast to bf16; not VCVTNEPS2BF16, which flushes subnormals.
__attribute__((target("avx512f"))) void store_rounded(bfloat16* out, __mmask16 mask, __m512 sums) {
  const __m512i u = _mm512_castps_si512(sums);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  // The zero-masked shifts: GCC 12 warns of the undefined lanes in the plain _mm512_srli_epi32.
  const __m512i ties_to_even = _mm512_add_epi32(
      _mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, u, 16), _mm512_set1_epi32(1)));
  __m512i rounded = _mm512_maskz_srli_epi32(0xffff, _mm512_add_epi32(u, ties_to_even), 16);
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7fc0));
  _mm512_mask_cvtepi32_storeu_epi16(out, mask, rounded);
}

// C[rows × up to 32 columns] from two panels (the second may be absent: `panels` 1 or 2), in f32
// or (Out = bfloat16, never accumulating) rounded once to bf16.
template <std::size_t Rows, std::size_t Panels, class Out, class A>
__attribute__((target("avx512f,avx512bf16"))) void block(A a, std::size_t k, const std::uint16_t* b0,
                                                         const std::uint16_t* b1, Out* c, std::size_t ldc,
                                                         __mmask16 mask0, __mmask16 mask1, bool accumulate) {
  __m512 acc[Rows][Panels];
  for (std::size_t r = 0; r < Rows; ++r)
    for (std::size_t q = 0; q < Panels; ++q) {
      const __mmask16 mask = q == 0 ? mask0 : mask1;
      if constexpr (std::is_same_v<Out, float>)
        acc[r][q] = accumulate ? _mm512_maskz_loadu_ps(mask, c + r * ldc + q * kPanel) : _mm512_setzero_ps();
      else
        acc[r][q] = _mm512_setzero_ps();
    }
  // A lambda does not inherit its function's target: it is given the same one.
  auto step = [&](std::size_t p, auto pair_of_row) __attribute__((target("avx512f,avx512bf16"))) {
    const __m512bh v0 = (__m512bh)_mm512_loadu_si512(b0 + p * 2 * kPanel);
    __m512bh v1 = v0;
    if constexpr (Panels == 2) v1 = (__m512bh)_mm512_loadu_si512(b1 + p * 2 * kPanel);
    for (std::size_t r = 0; r < Rows; ++r) {
      const __m512bh pair = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair_of_row(r)));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], pair, v0);
      if constexpr (Panels == 2) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], pair, v1);
    }
  };
  const std::size_t full = k / 2;
  for (std::size_t p = 0; p < full; ++p) step(p, [&](std::size_t r) { return a.word(r, p); });
  if (k % 2) step(full, [&](std::size_t r) { return a.last_word(r, full, k); });  // the last, odd column
  if constexpr (std::is_same_v<Out, float>) {
    for (std::size_t r = 0; r < Rows; ++r)
      for (std::size_t q = 0; q < Panels; ++q)
        _mm512_mask_storeu_ps(c + r * ldc + q * kPanel, q == 0 ? mask0 : mask1, acc[r][q]);
  } else {
    for (std::size_t r = 0; r < Rows; ++r)
      for (std::size_t q = 0; q < Panels; ++q)
        store_rounded(c + r * ldc + q * kPanel, q == 0 ? mask0 : mask1, acc[r][q]);
  }
}

template <std::size_t Rows, class Out, class A>
void row_block(A a, std::size_t n, std::size_t k, const std::uint16_t* packed, Out* c, std::size_t ldc,
               bool accumulate) {
  const std::size_t pairs = (k + 1) / 2, panel_size = pairs * 2 * kPanel;
  auto mask_for = [&](std::size_t j) {
    const std::size_t left = n > j ? n - j : 0;
    return static_cast<__mmask16>(left >= kPanel ? 0xffffu : (1u << left) - 1u);
  };
  for (std::size_t j = 0; j < n; j += 2 * kPanel) {
    const std::uint16_t* b0 = packed + (j / kPanel) * panel_size;
    if (j + kPanel < n)
      block<Rows, 2, Out>(a, k, b0, b0 + panel_size, c + j, ldc, mask_for(j), mask_for(j + kPanel), accumulate);
    else
      block<Rows, 1, Out>(a, k, b0, nullptr, c + j, ldc, mask_for(j), 0, accumulate);
  }
}

// Rows [first_row, last_row) of C from the packed B.
template <class Out, class A>
void row_blocks(std::size_t first_row, std::size_t last_row, std::size_t n, std::size_t k, A a,
                const std::uint16_t* packed, Out* c, std::size_t ldc, bool accumulate) {
  const std::size_t panel_size = (k + 1) / 2 * 2 * kPanel;
  // Columns in chunks whose packed B stays in the core's L2 cache while every row passes over it.
  const std::size_t chunk = std::max<std::size_t>(2 * kPanel, (256 * 1024 / (2 * panel_size)) * kPanel);
  for (std::size_t j = 0; j < n; j += chunk) {
    const std::size_t width = std::min(chunk, n - j);
    const std::uint16_t* b_chunk = packed + (j / kPanel) * panel_size;
    // Full blocks of kRows rows, then the rest with a block of its own height.
    using RowBlock = void (*)(A, std::size_t, std::size_t, const std::uint16_t*, Out*, std::size_t, bool);
    static constexpr auto kByRows = []<std::size_t... R>(std::index_sequence<R...>) {
      return std::array<RowBlock, kRows + 1>{nullptr, row_block<R + 1, Out, A>...};
    }
    (std::make_index_sequence<kRows>());
    for (std::size_t i = first_row; i < last_row; i += kRows) {
      const std::size_t rows = std::min(kRows, last_row - i);
      kByRows[rows](a.from_row(i), width, k, b_chunk, c + i * ldc + j, ldc, accumulate);
    }
  }
}

// ---- B read as stored ([k, n], not transposed) ----------------------------------------------
// Rows 2p and 2p+1 of 32 columns are interleaved in registers (VPUNPCKLWD/VPUNPCKHWD), not packed
// into memory first: the convolutions' columns and the MLP's backward operands are used once per
// call, and packing them was a pass over memory as long as the product's own reads. The unpacks
// work within 128-bit lanes, so `low` holds columns 8L+q and `high` columns 8L+4+q (lane L, q < 4);
// C is permuted into that order when loaded and back when stored. Each sum is the packed path's,
// pair for pair: the same bits.
struct StoredLanes {
  alignas(64) std::int32_t low[16], high[16], first[16], second[16];
};
constexpr StoredLanes kStoredLanes = [] {
  StoredLanes l{};
  for (int e = 0; e < 16; ++e) {
    l.low[e] = 8 * (e / 4) + e % 4;
    l.high[e] = 8 * (e / 4) + 4 + e % 4;
  }
  for (int j = 0; j < 32; ++j) {  // column j from `low` (index < 16) or `high` (16 and up)
    const int from = j % 8 < 4 ? 4 * (j / 8) + j % 8 : 16 + 4 * (j / 8) + j % 8 - 4;
    (j < 16 ? l.first[j] : l.second[j - 16]) = from;
  }
  return l;
}();

template <std::size_t Rows, class Out, class A>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void block_stored(A a, std::size_t k, const bfloat16* b,
                                                                         std::size_t ldb, Out* c, std::size_t ldc,
                                                                         bool accumulate) {
  const __m512i low = _mm512_load_si512(kStoredLanes.low), high = _mm512_load_si512(kStoredLanes.high);
  __m512 acc[Rows][2];
  for (std::size_t r = 0; r < Rows; ++r) {
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    if constexpr (std::is_same_v<Out, float>)
      if (accumulate) {
        const __m512 c0 = _mm512_loadu_ps(c + r * ldc), c1 = _mm512_loadu_ps(c + r * ldc + kPanel);
        acc[r][0] = _mm512_permutex2var_ps(c0, low, c1);
        acc[r][1] = _mm512_permutex2var_ps(c0, high, c1);
      }
  }
  auto step = [&](__m512i even, __m512i odd, auto pair_of_row) __attribute__((target("avx512f,avx512bw,avx512bf16"))) {
    const auto v0 = (__m512bh)_mm512_unpacklo_epi16(even, odd), v1 = (__m512bh)_mm512_unpackhi_epi16(even, odd);
    for (std::size_t r = 0; r < Rows; ++r) {
      const __m512bh pair = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair_of_row(r)));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], pair, v0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], pair, v1);
    }
  };
  const std::size_t full = k / 2;
  for (std::size_t p = 0; p < full; ++p)
    step(_mm512_loadu_si512(b + 2 * p * ldb), _mm512_loadu_si512(b + (2 * p + 1) * ldb),
         [&](std::size_t r) { return a.word(r, p); });
  if (k % 2)  // the last, odd row of B, paired with zeros
    step(_mm512_loadu_si512(b + 2 * full * ldb), _mm512_setzero_si512(),
         [&](std::size_t r) { return a.last_word(r, full, k); });
  const __m512i first = _mm512_load_si512(kStoredLanes.first), second = _mm512_load_si512(kStoredLanes.second);
  for (std::size_t r = 0; r < Rows; ++r) {
    const __m512 out0 = _mm512_permutex2var_ps(acc[r][0], first, acc[r][1]);
    const __m512 out1 = _mm512_permutex2var_ps(acc[r][0], second, acc[r][1]);
    if constexpr (std::is_same_v<Out, float>) {
      _mm512_storeu_ps(c + r * ldc, out0);
      _mm512_storeu_ps(c + r * ldc + kPanel, out1);
    } else {
      store_rounded(c + r * ldc, 0xffff, out0);
      store_rounded(c + r * ldc + kPanel, 0xffff, out1);
    }
  }
}

template <std::size_t Rows, class Out, class A>
void row_block_stored(A a, std::size_t width, std::size_t k, const bfloat16* b, std::size_t ldb, Out* c,
                      std::size_t ldc, bool accumulate) {
  for (std::size_t j = 0; j < width; j += 2 * kPanel) block_stored<Rows, Out>(a, k, b + j, ldb, c + j, ldc, accumulate);
}

// Rows [first_row, last_row) of C's first n columns (a multiple of 32), B read as stored.
template <class Out, class A>
void row_blocks_stored(std::size_t first_row, std::size_t last_row, std::size_t n, std::size_t k, A a,
                       const bfloat16* b, std::size_t ldb, Out* c, std::size_t ldc, bool accumulate) {
  // Columns in chunks of B (k rows) that stay in the core's L2 cache while every row passes over them.
  const std::size_t chunk = std::max<std::size_t>(2 * kPanel, 128 * 1024 / (2 * k) / (2 * kPanel) * (2 * kPanel));
  using RowBlock = void (*)(A, std::size_t, std::size_t, const bfloat16*, std::size_t, Out*, std::size_t, bool);
  static constexpr auto kByRows = []<std::size_t... R>(std::index_sequence<R...>) {
    return std::array<RowBlock, kRows + 1>{nullptr, row_block_stored<R + 1, Out, A>...};
  }
  (std::make_index_sequence<kRows>());
  for (std::size_t j = 0; j < n; j += chunk) {
    const std::size_t width = std::min(chunk, n - j);
    for (std::size_t i = first_row; i < last_row; i += kRows) {
      const std::size_t rows = std::min(kRows, last_row - i);
      kByRows[rows](a.from_row(i), width, k, b + j, ldb, c + i * ldc + j, ldc, accumulate);
    }
  }
}

// Each block of kRows rows unpacks B again, where packing it is one pass: B is read as stored
// only for at most 8 such blocks (measured: 64×576×288 ran ~15% faster stored, 288×576×64 ~10%
// slower).
constexpr std::size_t kMaxRowsReadingStoredB = 8 * kRows;

// B as stored is read in place in whole blocks of 32 columns (for at most kMaxRowsReadingStoredB
// rows of A); the rest (all of a transposed B) is packed, into the calling thread's scratch.
struct PreparedB {
  std::size_t stored;           // the columns read as stored
  const std::uint16_t* packed;  // the panels of the rest
};
PreparedB prepare_b(std::size_t m, std::size_t n, std::size_t k, BView b) {
  const bool read_stored = !b.transposed && m <= kMaxRowsReadingStoredB && cpu_has_avx512bw();
  const std::size_t stored = read_stored ? n / (2 * kPanel) * (2 * kPanel) : 0;
  if (stored == n) return {stored, nullptr};
  const std::size_t panels = (n - stored + kPanel - 1) / kPanel, words = panels * (k + 1) / 2 * kPanel;
  auto* packed = thread_scratch<std::uint32_t>(kGemmPackingSlot, words);
  pack_b(n - stored, k, BView{b.transposed ? b.b + stored * b.ldb : b.b + stored, b.ldb, b.transposed}, packed);
  return {stored, reinterpret_cast<const std::uint16_t*>(packed)};
}

// Rows [first_row, last_row) of C: the first `stored` columns from B as stored, the rest from the
// packed panels.
template <class Out, class A>
void product_rows(std::size_t first_row, std::size_t last_row, std::size_t n, std::size_t k, A a, BView b,
                  std::size_t stored, const std::uint16_t* panels, Out* c, std::size_t ldc, bool accumulate) {
  if (stored > 0) row_blocks_stored(first_row, last_row, stored, k, a, b.b, b.ldb, c, ldc, accumulate);
  if (stored < n) row_blocks(first_row, last_row, n - stored, k, a, panels, c + stored, ldc, accumulate);
}

// The blocks of kRows rows are the parallel pieces (Note [CPU threads]), B packed (where it is)
// once by the caller: every element of C is the same dot product whoever computes it.
template <class Out>
void gemm_avx512_bf16(std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, std::size_t lda, BView b, Out* c,
                      std::size_t ldc, bool accumulate) {
  // Not a structured binding: clang before 16 cannot capture one in the lambda below.
  const PreparedB prepared = prepare_b(m, n, k, b);
  const std::size_t stored = prepared.stored;
  const std::uint16_t* panels = prepared.packed;
  const std::size_t blocks = (m + kRows - 1) / kRows;
  const std::size_t blocks_per_piece =
      static_cast<std::size_t>(std::max(1.0, kGemmProductsPerPiece / static_cast<double>(kRows * n * k)));
  parallel_for(
      blocks, blocks_per_piece,
      [&](std::size_t first, std::size_t last) {
        product_rows(first * kRows, std::min(m, last * kRows), n, k, ARows{a, lda}, b, stored, panels, c, ldc,
                     accumulate);
      },
      1);
}

// The empty products, and the check that this CPU has `path`: whether anything is left to do.
bool product_to_do(std::size_t m, std::size_t n, std::size_t k, float* c, std::size_t ldc, bool accumulate,
                   Bf16GemmPath path) {
  if (m == 0 || n == 0) return false;
  if (k == 0) {
    if (!accumulate)
      for (std::size_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return false;
  }
  EMBER_CHECK(path == Bf16GemmPath::scalar || cpu_has_avx512_bf16(), DeviceError, "gemm_bf16: this CPU has no ",
              bf16_gemm_path_name(path), " path");
  return true;
}

}  // namespace

std::string_view bf16_gemm_path_name(Bf16GemmPath path) {
  return path == Bf16GemmPath::avx512_bf16 ? "avx512_bf16" : "scalar";
}

std::vector<Bf16GemmPath> bf16_gemm_paths() {
  if (cpu_has_avx512_bf16()) return {Bf16GemmPath::scalar, Bf16GemmPath::avx512_bf16};
  return {Bf16GemmPath::scalar};
}

Bf16GemmPath best_bf16_gemm_path() { return bf16_gemm_paths().back(); }

void gemm_bf16(Transpose tb, std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, std::size_t lda,
               const bfloat16* b, std::size_t ldb, float* c, std::size_t ldc, bool accumulate, Bf16GemmPath path) {
  if (!product_to_do(m, n, k, c, ldc, accumulate, path)) return;
  const BView view{b, ldb, tb == Transpose::yes};
  if (path == Bf16GemmPath::avx512_bf16) return gemm_avx512_bf16(m, n, k, a, lda, view, c, ldc, accumulate);
  gemm_scalar(m, n, k, AView{a, lda, false}, view, c, ldc, accumulate);
}

void gemm_bf16_small(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, const bfloat16* a,
                     std::size_t lda, const bfloat16* b, std::size_t ldb, float* c, std::size_t ldc, bool accumulate,
                     Bf16GemmPath path) {
  if (!product_to_do(m, n, k, c, ldc, accumulate, path)) return;
  const BView view{b, ldb, tb == Transpose::yes};
  if (path == Bf16GemmPath::scalar)
    return gemm_scalar(m, n, k, AView{a, lda, ta == Transpose::yes}, view, c, ldc, accumulate);
  const auto [stored, panels] = prepare_b(m, n, k, view);
  if (ta == Transpose::no) return product_rows(0, m, n, k, ARows{a, lda}, view, stored, panels, c, ldc, accumulate);
  auto* pairs = thread_scratch<std::uint32_t>(kGemmPackingASlot, (k + 1) / 2 * m);
  pack_a_pairs(k, m, a, lda, pairs);
  product_rows(0, m, n, k, APairs{pairs, m}, view, stored, panels, c, ldc, accumulate);
}

void gemm_bf16_rounded(Transpose tb, std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, std::size_t lda,
                       const bfloat16* b, std::size_t ldb, bfloat16* c, std::size_t ldc, Bf16GemmPath path) {
  if (path == Bf16GemmPath::avx512_bf16 && m > 0 && n > 0 && k > 0 && cpu_has_avx512_bf16())
    return gemm_avx512_bf16(m, n, k, a, lda, BView{b, ldb, tb == Transpose::yes}, c, ldc, false);
  // The scalar path (and the empty cases): the f32 product, then the cast's rounding.
  std::vector<float> sums(m * n);
  gemm_bf16(tb, m, n, k, a, lda, b, ldb, sums.data(), n, false, path);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = bfloat16(sums[i * n + j]);
}

}  // namespace ember::kernels::cpu
