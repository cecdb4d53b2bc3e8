// A 16×16 transpose of 32-bit words in AVX-512 registers, for the GEMMs' packing of a transposed
// B (f32 values, or bf16 pairs as one word): kernels/cpu/gemm_bf16.cpp, kernels/cpu/gemm_f32.cpp;
// and for the fused attention's transposed query tile (kernels/cpu/attention.cpp).
#pragma once

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace ember::kernels::cpu {

// 16 rows of 16 32-bit words (row t at in + t·stride_bytes) transposed: vector w (stored at
// out + w·out_stride words) holds word w of every row. Four rounds of block swaps (8×8, 4×4, 2×2, 1×1
// blocks off the diagonal), each a two-source permute per pair of rows.
__attribute__((target("avx512f"))) inline void transpose_16x16_words(const void* in, std::size_t stride_bytes,
                                                                     std::uint32_t* out, std::size_t out_stride = 16) {
  __m512i rows[16];
  const auto* bytes = static_cast<const unsigned char*>(in);
  for (std::size_t t = 0; t < 16; ++t) rows[t] = _mm512_loadu_si512(bytes + t * stride_bytes);
  // Row i (bit `size` clear) keeps its words c with c & size clear and takes row i+size's words
  // c − size in the others (index 16 and up: the second source); row i+size gets the mirror image.
  struct Indices {
    alignas(64) std::int32_t low[16], high[16];
  };
  static constexpr auto kSwaps = [] {
    std::array<Indices, 4> swaps{};
    for (int round = 0, size = 8; round < 4; ++round, size /= 2)
      for (int c = 0; c < 16; ++c) {
        swaps[round].low[c] = (c & size) == 0 ? c : 16 + c - size;
        swaps[round].high[c] = (c & size) == 0 ? c + size : 16 + c;
      }
    return swaps;
  }();
  for (int round = 0, size = 8; round < 4; ++round, size /= 2) {
    const __m512i low_index = _mm512_load_si512(kSwaps[round].low);
    const __m512i high_index = _mm512_load_si512(kSwaps[round].high);
    for (int i = 0; i < 16; ++i) {
      if (i & size) continue;
      const __m512i a = rows[i], b = rows[i + size];
      rows[i] = _mm512_permutex2var_epi32(a, low_index, b);
      rows[i + size] = _mm512_permutex2var_epi32(a, high_index, b);
    }
  }
  for (std::size_t w = 0; w < 16; ++w) _mm512_storeu_si512(out + w * out_stride, rows[w]);
}

// A matrix of `rows` × `cols` 32-bit values (row r at in + r·in_stride values) transposed into out
// (its row c at out + c·out_stride values): 16 × 16 blocks in registers, the edges value by value.
template <class Word>
__attribute__((target("avx512f"))) inline void transpose_words(const Word* in, std::size_t in_stride, std::size_t rows,
                                                               std::size_t cols, Word* out, std::size_t out_stride) {
  static_assert(sizeof(Word) == 4);
  std::size_t r = 0;
  for (; r + 16 <= rows; r += 16) {
    std::size_t c = 0;
    for (; c + 16 <= cols; c += 16)
      transpose_16x16_words(in + r * in_stride + c, in_stride * sizeof(Word),
                            reinterpret_cast<std::uint32_t*>(out + c * out_stride + r), out_stride);
    for (; c < cols; ++c)
      for (std::size_t t = 0; t < 16; ++t) out[c * out_stride + r + t] = in[(r + t) * in_stride + c];
  }
  for (; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) out[c * out_stride + r] = in[r * in_stride + c];
}

}  // namespace ember::kernels::cpu
