// The CPU's bf16 GEMM: the scalar path and the AVX512-BF16 one (Note [bf16 GEMM paths]).
#include "kernels/gemm_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/base/error.h"

namespace ember::kernels::cpu {
namespace {

// Bits of a[i][2p] and a[i][2p+1] as one 32-bit word (the low half first), 0 past column k.
std::uint32_t a_pair(const bfloat16* row, std::size_t p, std::size_t k) {
  const std::uint32_t lo = row[2 * p].bits;
  const std::uint32_t hi = 2 * p + 1 < k ? row[2 * p + 1].bits : 0u;
  return lo | (hi << 16);
}

// op(B)[p][j], B stored [k, n] or (transposed) [n, k].
struct BView {
  const bfloat16* b;
  std::size_t ldb;
  bool transposed;
  bfloat16 at(std::size_t p, std::size_t j) const { return transposed ? b[j * ldb + p] : b[p * ldb + j]; }
};

void gemm_scalar(std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, std::size_t lda, BView b, float* c,
                 std::size_t ldc, bool accumulate) {
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      float sum = accumulate ? c[i * ldc + j] : 0.0f;
      // VDPBF16PS's order: the odd element of each pair first, then the even one.
      for (std::size_t p = 0; 2 * p < k; ++p) {
        if (2 * p + 1 < k) sum += static_cast<float>(a[i * lda + 2 * p + 1]) * static_cast<float>(b.at(2 * p + 1, j));
        sum += static_cast<float>(a[i * lda + 2 * p]) * static_cast<float>(b.at(2 * p, j));
      }
      c[i * ldc + j] = sum;
    }
}

// ---- AVX512-BF16 -----------------------------------------------------------------------------
constexpr std::size_t kRows = 6;    // rows of C held in registers
constexpr std::size_t kPanel = 16;  // columns of one packed panel (one register of f32)

// B packed for VDPBF16PS: panels of 16 columns; in each, for each pair of rows p, 32 bf16 values
// b[2p][j], b[2p+1][j] for j in the panel. Zeros past row k and column n.
void pack_b(std::size_t n, std::size_t k, BView b, std::vector<std::uint16_t>& packed) {
  const std::size_t pairs = (k + 1) / 2, panels = (n + kPanel - 1) / kPanel;
  packed.assign(panels * pairs * 2 * kPanel, 0);
  for (std::size_t panel = 0; panel < panels; ++panel)
    for (std::size_t p = 0; p < pairs; ++p) {
      std::uint16_t* out = packed.data() + (panel * pairs + p) * 2 * kPanel;
      for (std::size_t c = 0; c < kPanel && panel * kPanel + c < n; ++c) {
        const std::size_t j = panel * kPanel + c;
        out[2 * c] = b.at(2 * p, j).bits;
        if (2 * p + 1 < k) out[2 * c + 1] = b.at(2 * p + 1, j).bits;
      }
    }
}

// C[rows × up to 32 columns] from two panels (the second may be absent: `panels` 1 or 2).
template <std::size_t Rows, std::size_t Panels>
__attribute__((target("avx512f,avx512bf16"))) void block(const bfloat16* a, std::size_t lda, std::size_t k,
                                                         const std::uint16_t* b0, const std::uint16_t* b1, float* c,
                                                         std::size_t ldc, __mmask16 mask0, __mmask16 mask1,
                                                         bool accumulate) {
  __m512 acc[Rows][Panels];
  for (std::size_t r = 0; r < Rows; ++r)
    for (std::size_t q = 0; q < Panels; ++q) {
      const __mmask16 mask = q == 0 ? mask0 : mask1;
      acc[r][q] = accumulate ? _mm512_maskz_loadu_ps(mask, c + r * ldc + q * kPanel) : _mm512_setzero_ps();
    }
  const std::size_t pairs = (k + 1) / 2;
  for (std::size_t p = 0; p < pairs; ++p) {
    const __m512bh v0 = (__m512bh)_mm512_loadu_si512(b0 + p * 2 * kPanel);
    __m512bh v1 = v0;
    if constexpr (Panels == 2) v1 = (__m512bh)_mm512_loadu_si512(b1 + p * 2 * kPanel);
    for (std::size_t r = 0; r < Rows; ++r) {
      const __m512bh pair = (__m512bh)_mm512_set1_epi32(static_cast<int>(a_pair(a + r * lda, p, k)));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], pair, v0);
      if constexpr (Panels == 2) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], pair, v1);
    }
  }
  for (std::size_t r = 0; r < Rows; ++r)
    for (std::size_t q = 0; q < Panels; ++q)
      _mm512_mask_storeu_ps(c + r * ldc + q * kPanel, q == 0 ? mask0 : mask1, acc[r][q]);
}

template <std::size_t Rows>
void row_block(const bfloat16* a, std::size_t lda, std::size_t n, std::size_t k, const std::uint16_t* packed, float* c,
               std::size_t ldc, bool accumulate) {
  const std::size_t pairs = (k + 1) / 2, panel_size = pairs * 2 * kPanel;
  auto mask_for = [&](std::size_t j) {
    const std::size_t left = n > j ? n - j : 0;
    return static_cast<__mmask16>(left >= kPanel ? 0xffffu : (1u << left) - 1u);
  };
  for (std::size_t j = 0; j < n; j += 2 * kPanel) {
    const std::uint16_t* b0 = packed + (j / kPanel) * panel_size;
    if (j + kPanel < n)
      block<Rows, 2>(a, lda, k, b0, b0 + panel_size, c + j, ldc, mask_for(j), mask_for(j + kPanel), accumulate);
    else
      block<Rows, 1>(a, lda, k, b0, nullptr, c + j, ldc, mask_for(j), 0, accumulate);
  }
}

void gemm_avx512_bf16(std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, std::size_t lda, BView b,
                      float* c, std::size_t ldc, bool accumulate) {
  thread_local std::vector<std::uint16_t> packed;
  pack_b(n, k, b, packed);
  std::size_t i = 0;
  for (; i + kRows <= m; i += kRows)
    row_block<kRows>(a + i * lda, lda, n, k, packed.data(), c + i * ldc, ldc, accumulate);
  const bfloat16* a_rest = a + i * lda;
  float* c_rest = c + i * ldc;
  switch (m - i) {
    case 5:
      return row_block<5>(a_rest, lda, n, k, packed.data(), c_rest, ldc, accumulate);
    case 4:
      return row_block<4>(a_rest, lda, n, k, packed.data(), c_rest, ldc, accumulate);
    case 3:
      return row_block<3>(a_rest, lda, n, k, packed.data(), c_rest, ldc, accumulate);
    case 2:
      return row_block<2>(a_rest, lda, n, k, packed.data(), c_rest, ldc, accumulate);
    case 1:
      return row_block<1>(a_rest, lda, n, k, packed.data(), c_rest, ldc, accumulate);
    default:
      return;
  }
}

bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f");
}

}  // namespace

std::string_view bf16_gemm_path_name(Bf16GemmPath path) {
  return path == Bf16GemmPath::avx512_bf16 ? "avx512_bf16" : "scalar";
}

std::vector<Bf16GemmPath> bf16_gemm_paths() {
  static const bool avx512_bf16 = cpu_has_avx512_bf16();
  if (avx512_bf16) return {Bf16GemmPath::scalar, Bf16GemmPath::avx512_bf16};
  return {Bf16GemmPath::scalar};
}

Bf16GemmPath best_bf16_gemm_path() { return bf16_gemm_paths().back(); }

void gemm_bf16(Transpose tb, std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, std::size_t lda,
               const bfloat16* b, std::size_t ldb, float* c, std::size_t ldc, bool accumulate, Bf16GemmPath path) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (std::size_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  const auto paths = bf16_gemm_paths();
  EMBER_CHECK(std::find(paths.begin(), paths.end(), path) != paths.end(), DeviceError, "gemm_bf16: this CPU has no ",
              bf16_gemm_path_name(path), " path");
  const BView view{b, ldb, tb == Transpose::yes};
  if (path == Bf16GemmPath::avx512_bf16) return gemm_avx512_bf16(m, n, k, a, lda, view, c, ldc, accumulate);
  gemm_scalar(m, n, k, a, lda, view, c, ldc, accumulate);
}

}  // namespace ember::kernels::cpu
