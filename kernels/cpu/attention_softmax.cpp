// The fused attention's exponentials and online softmax on the CPU (kernels/cpu/attention_softmax.h).
#include "kernels/cpu/attention_softmax.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu_features.h"

namespace ember::kernels::cpu {
namespace {

template <class T>
constexpr T kMinusInfinity = -std::numeric_limits<T>::infinity();
constexpr std::size_t kMaxVectors = kSoftmaxTileRows / 16;

// e^(x − shift) on 16 lanes, as 2^((x − shift)·log₂e): the one formula of the softmax's
// exponentials on AVX-512. x − shift is exact for the scores within a factor 2 of the shift, the
// ones that carry a row's weight.
__attribute__((target("avx512f"))) inline __m512 exp_of_difference(__m512 x, __m512 shift) {
  return exp2_avx512(_mm512_mul_ps(_mm512_sub_ps(x, shift), _mm512_set1_ps(1.44269504088896341f)));
}

__mmask16 first_lanes(std::size_t count) {
  return count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1);
}

// exp_shifted for f32 on AVX-512.
__attribute__((target("avx512f"))) void exp_shifted_avx512(const float* in, float shift, float* out, std::size_t n) {
  const __m512 by = _mm512_set1_ps(shift);
  for (std::size_t c = 0; c < n; c += 16) {
    const __mmask16 lanes = first_lanes(n - c);
    _mm512_mask_storeu_ps(out + c, lanes, exp_of_difference(_mm512_maskz_loadu_ps(lanes, in + c), by));
  }
}

}  // namespace

template <class T>
void exp_shifted(const T* in, T shift, T* out, std::size_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (cpu_has_avx512f()) return exp_shifted_avx512(in, shift, out, n);
  for (std::size_t c = 0; c < n; ++c) out[c] = std::exp(in[c] - shift);
}

namespace {

// softmax_tile in loops, for f64 and for f32 where the CPU has no AVX-512.
template <class C>
void softmax_tile_scalar(C* st, std::size_t ld, std::size_t cols, std::size_t rows, C* m, C* l, C* rescale) {
  for (std::size_t r = 0; r < rows; ++r) {
    C best = m[r];
    for (std::size_t c = 0; c < cols; ++c) best = std::max(best, st[c * ld + r]);
    const C shift = best == kMinusInfinity<C> ? C(0) : best;
    rescale[r] = std::exp(m[r] - shift);
    C sum = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      C& x = st[c * ld + r];
      x = std::exp(x - shift);
      sum += x;
    }
    l[r] = l[r] * rescale[r] + sum;
    m[r] = best;
  }
}

// The same for f32 on AVX-512, `Vectors` registers of 16 queries (rows ≤ 16·Vectors): each key's
// row of the tile is a step of every register's maximum, then of its exponentials and sums.
// Masked forms with every lane set, as in exp_avx512.h (GCC bug 105593).
template <std::size_t Vectors>
__attribute__((target("avx512f"))) void softmax_tile_avx512(float* st, std::size_t ld, std::size_t cols,
                                                            std::size_t rows, float* m, float* l, float* rescale) {
  constexpr __mmask16 kAll = 0xffff;
  __mmask16 lanes[Vectors];
  __m512 best[Vectors], shift[Vectors], sum[Vectors];
#pragma GCC unroll 8
  for (std::size_t v = 0; v < Vectors; ++v) {
    lanes[v] = first_lanes(rows - 16 * v);
    best[v] = _mm512_maskz_loadu_ps(lanes[v], m + 16 * v);
  }
  for (std::size_t c = 0; c < cols; ++c)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < Vectors; ++v)
      best[v] = _mm512_mask_max_ps(best[v], kAll, best[v], _mm512_maskz_loadu_ps(lanes[v], st + c * ld + 16 * v));
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (std::size_t v = 0; v < Vectors; ++v) {
    const __mmask16 nothing_yet = _mm512_cmp_ps_mask(best[v], _mm512_set1_ps(kMinusInfinity<float>), _CMP_EQ_OQ);
    shift[v] = _mm512_mask_mov_ps(best[v], nothing_yet, zero);
    _mm512_mask_storeu_ps(rescale + 16 * v, lanes[v],
                          exp_of_difference(_mm512_maskz_loadu_ps(lanes[v], m + 16 * v), shift[v]));
    _mm512_mask_storeu_ps(m + 16 * v, lanes[v], best[v]);
    sum[v] = zero;
  }
  for (std::size_t c = 0; c < cols; ++c)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < Vectors; ++v) {
      float* at = st + c * ld + 16 * v;
      const __m512 e = exp_of_difference(_mm512_maskz_loadu_ps(lanes[v], at), shift[v]);
      _mm512_mask_storeu_ps(at, lanes[v], e);
      sum[v] = _mm512_add_ps(sum[v], e);
    }
#pragma GCC unroll 8
  for (std::size_t v = 0; v < Vectors; ++v) {
    const __m512 scaled =
        _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes[v], l + 16 * v), _mm512_maskz_loadu_ps(lanes[v], rescale + 16 * v));
    _mm512_mask_storeu_ps(l + 16 * v, lanes[v], _mm512_add_ps(scaled, sum[v]));
  }
}

using SoftmaxTile = void (*)(float*, std::size_t, std::size_t, std::size_t, float*, float*, float*);
constexpr auto kSoftmaxTiles = []<std::size_t... V>(std::index_sequence<V...>) {
  return std::array<SoftmaxTile, kMaxVectors + 1>{nullptr, softmax_tile_avx512<V + 1>...};
}
(std::make_index_sequence<kMaxVectors>());

}  // namespace

template <class C>
void softmax_tile(C* st, std::size_t ld, std::size_t cols, std::size_t rows, C* m, C* l, C* rescale) {
  if (rows == 0) return;  // the table has no kernel for 0 registers
  if constexpr (std::is_same_v<C, float>)
    if (cpu_has_avx512f()) return kSoftmaxTiles[(rows + 15) / 16](st, ld, cols, rows, m, l, rescale);
  softmax_tile_scalar(st, ld, cols, rows, m, l, rescale);
}

template void exp_shifted<float>(const float*, float, float*, std::size_t);
template void exp_shifted<double>(const double*, double, double*, std::size_t);
template void softmax_tile<float>(float*, std::size_t, std::size_t, std::size_t, float*, float*, float*);
template void softmax_tile<double>(double*, std::size_t, std::size_t, std::size_t, double*, double*, double*);

}  // namespace ember::kernels::cpu
