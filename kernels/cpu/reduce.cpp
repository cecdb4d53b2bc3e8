// CPU twins of the reductions. Float sums accumulate in double: more accurate than the CUDA
// tree, and still deterministic.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/parallel.h"
#include "kernels/reduce.h"

namespace ember::kernels {

std::size_t sum_workspace_size(std::size_t outer, std::size_t reduce, std::size_t inner) {
  // Mirrors the CUDA launchers' choice, from the shape alone (so the result is the same every run).
  if (inner == 1) {
    // A long reduction over few rows is split into chunks of kChunk elements, one partial sum per
    // (row, chunk).
    constexpr std::size_t kChunk = 8192, kMaxChunks = 512, kFewRows = 64;
    if (outer >= kFewRows || reduce < 2 * kChunk) return 0;
    std::size_t chunks = ceil_div(reduce, kChunk);
    if (chunks > kMaxChunks) chunks = kMaxChunks;
    return outer * chunks;
  }
  // Column sums (kernels/cuda/column_sum.cuh): blocks of 32 columns; when there are too few of
  // them to fill the GPU and the columns are long, the rows are split into chunks of kRows, one
  // partial sum per (chunk, column).
  constexpr std::size_t kTile = 32, kFewTiles = 128, kRows = 1024, kMaxChunks = 512;
  const std::size_t cols = outer * inner;
  if (ceil_div(cols, kTile) >= kFewTiles || reduce < 2 * kRows) return 0;
  std::size_t chunks = ceil_div(reduce, kRows);
  if (chunks > kMaxChunks) chunks = kMaxChunks;
  return chunks * cols;
}

}  // namespace ember::kernels

namespace ember::kernels::cpu {
namespace {
template <class T>
struct Accumulator {
  using type = double;
};

// Column sums: columns [first, last) of a [reduce, inner] block, each added up row by row in
// `Acc`, then scaled into out. The plain loop and the AVX-512 one (f32 widened to f64, 8 columns a
// register) make the same additions in the same order: the same bits.
template <class T, class Acc>
void sum_columns(const T* block, T* out, std::size_t reduce, std::size_t inner, std::size_t first, std::size_t last,
                 Acc scale) {
  std::vector<Acc> acc(last - first, Acc(0));
  for (std::size_t r = 0; r < reduce; ++r) {
    const T* row = block + r * inner + first;
    for (std::size_t i = 0; i < last - first; ++i) acc[i] += row[i];
  }
  for (std::size_t i = 0; i < last - first; ++i) out[first + i] = static_cast<T>(acc[i] * scale);
}

// Columns [c0, c0 + 8·Registers), 8 a register.
template <std::size_t Registers>
__attribute__((target("avx512f"))) void sum_column_registers(const float* block, float* out, std::size_t reduce,
                                                             std::size_t inner, std::size_t c0, double scale) {
  __m512d acc[Registers];
#pragma GCC unroll 8
  for (std::size_t q = 0; q < Registers; ++q) acc[q] = _mm512_setzero_pd();
  for (std::size_t r = 0; r < reduce; ++r) {
    const float* row = block + r * inner + c0;
    // The masked conversions, because the plain forms pass GCC 12 an undefined source operand that
    // -Wmaybe-uninitialized reports (GCC bug 105593).
#pragma GCC unroll 8
    for (std::size_t q = 0; q < Registers; ++q)
      acc[q] = _mm512_add_pd(acc[q], _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(row + 8 * q)));
  }
#pragma GCC unroll 8
  for (std::size_t q = 0; q < Registers; ++q)
    _mm256_storeu_ps(out + c0 + 8 * q, _mm512_maskz_cvtpd_ps(0xff, _mm512_mul_pd(acc[q], _mm512_set1_pd(scale))));
}

__attribute__((target("avx512f"))) void sum_columns_avx512(const float* block, float* out, std::size_t reduce,
                                                           std::size_t inner, std::size_t first, std::size_t last,
                                                           double scale) {
  std::size_t c = first;
  for (; c + 64 <= last; c += 64) sum_column_registers<8>(block, out, reduce, inner, c, scale);
  for (; c + 8 <= last; c += 8) sum_column_registers<1>(block, out, reduce, inner, c, scale);
  if (c < last) sum_columns<float, double>(block, out, reduce, inner, c, last, scale);
}
}  // namespace

template <class T>
void sum(const T* x, T* out, std::size_t outer, std::size_t reduce, std::size_t inner, T scale) {
  using Acc = typename Accumulator<T>::type;
  if (inner == 1) {
    // Eight independent partial sums, combined in a fixed order: the loop vectorizes and does
    // not wait on one long chain of additions, and the result is still the same every run.
    constexpr std::size_t kLanes = 8;
    for (std::size_t o = 0; o < outer; ++o) {
      const T* row = x + o * reduce;
      Acc lanes[kLanes] = {};
      std::size_t r = 0;
      for (; r + kLanes <= reduce; r += kLanes)
        for (std::size_t l = 0; l < kLanes; ++l) lanes[l] += row[r + l];
      Acc acc = 0;
      for (std::size_t l = 0; l < kLanes; ++l) acc += lanes[l];
      for (; r < reduce; ++r) acc += row[r];
      out[o] = static_cast<T>(acc * scale);
    }
    return;
  }
  // Reduce the middle dim row by row, so the inner loop runs over contiguous memory; blocks of
  // columns in parallel (each column's sum is whole on one thread).
  bool avx512 = false;
  if constexpr (std::is_same_v<T, float>) avx512 = cpu_has_avx512f();
  for (std::size_t o = 0; o < outer; ++o) {
    const T* block = x + o * reduce * inner;
    T* sums = out + o * inner;
    parallel_for(inner, std::max<std::size_t>(64, items_per_piece(reduce)), [&](std::size_t first, std::size_t last) {
      if constexpr (std::is_same_v<T, float>)
        if (avx512) return sum_columns_avx512(block, sums, reduce, inner, first, last, Acc(scale));
      sum_columns<T, Acc>(block, sums, reduce, inner, first, last, Acc(scale));
    });
  }
}

template <class T>
void max_last_dim(const T* x, T* values, std::int64_t* indices, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* row = x + r * cols;
    std::size_t best = 0;
    for (std::size_t c = 1; c < cols; ++c) {
      if (std::isnan(row[best])) break;
      if (row[c] > row[best] || std::isnan(row[c])) best = c;
    }
    if (values) values[r] = row[best];
    if (indices) indices[r] = static_cast<std::int64_t>(best);
  }
}

template <class A, class B>
void count_equal(const A* a, const B* b, std::int64_t* count, std::size_t n) {
  std::int64_t equal = 0;
  for (std::size_t i = 0; i < n; ++i) equal += static_cast<std::int64_t>(a[i]) == static_cast<std::int64_t>(b[i]);
  *count = equal;
}

template void sum<float>(const float*, float*, std::size_t, std::size_t, std::size_t, float);
template void sum<double>(const double*, double*, std::size_t, std::size_t, std::size_t, double);
template void max_last_dim<float>(const float*, float*, std::int64_t*, std::size_t, std::size_t);
template void max_last_dim<double>(const double*, double*, std::int64_t*, std::size_t, std::size_t);
template void count_equal<std::int64_t, std::int32_t>(const std::int64_t*, const std::int32_t*, std::int64_t*,
                                                      std::size_t);
template void count_equal<std::int64_t, std::int64_t>(const std::int64_t*, const std::int64_t*, std::int64_t*,
                                                      std::size_t);
template void count_equal<std::int32_t, std::int32_t>(const std::int32_t*, const std::int32_t*, std::int64_t*,
                                                      std::size_t);

}  // namespace ember::kernels::cpu
