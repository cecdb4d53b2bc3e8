// erf(x) for 16 floats in AVX-512 registers, within 1 ulp of the correctly rounded value over the
// whole f32 range (test_kernels), for exact GELU and erf on the CPU (kernels/cpu/elementwise.cpp), where glibc's
// scalar erff took as long as the rest of the transformer's MLP.
//
// erf is odd: the work is on a = |x| and the sign is put back at the end. Two pieces, both
// computed for every lane and one chosen (a vector has no branch):
// - a < 0.921875: erf(a) = a + a·R(a²), R of degree 6 (relative error 4e-10 in exact arithmetic;
//   a + a·R rather than a·(1 + R) keeps R's constant 2/√π − 1 to f32's full precision);
// - above: erf(a) = 1 − e^(−a²)·Q(t), t = 1/(1 + a), Q of degree 8 in t fitting erfc(a)·e^(a²) on
//   [0.921875, 4] (relative error 4e-10); beyond 4, e^(−a²)·Q is below half an ulp of 1 and the
//   result is 1 (∞ included: e^(−∞) is 0). e^(−a²) is exp_avx512's, with a² split into its rounded
//   value and the rounding error (one FMA) so that the square's rounding does not reach erfc.
// Both polynomials are weighted least-squares fits to the relative error at Chebyshev nodes, made
// with mpmath; the boundary 0.921875 is where the two pieces' f32 errors cross. NaN stays NaN.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/exp_avx512.h"

namespace ember::kernels::cpu {

__attribute__((target("avx512f"))) inline __m512 erf_avx512(__m512 x) {
  constexpr __mmask16 kAll = 0xffff;
  const __m512i bits = _mm512_castps_si512(x), sign_bit = _mm512_set1_epi32(INT32_MIN);
  const __m512i sign = _mm512_mask_and_epi32(bits, kAll, bits, sign_bit);
  const __m512 a = _mm512_castsi512_ps(_mm512_mask_andnot_epi32(bits, kAll, sign_bit, bits));
  const __m512 a2 = _mm512_mul_ps(a, a);
  // The large piece's a, at most 4.5: a² stays finite (∞·0 would give NaN), and NaN stays NaN
  // (VMINPS returns its second operand when one is NaN).
  const __m512 a_large = _mm512_mask_min_ps(a, kAll, _mm512_set1_ps(4.5f), a);
  const __m512 a2_large = _mm512_mul_ps(a_large, a_large);

  // The small piece: a + a·R(a²).
  __m512 p = _mm512_set1_ps(8.370426804e-05f);
  p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(-8.142794832e-04f));
  p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(5.201042164e-03f));
  p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(-2.685940266e-02f));
  p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(1.128369570e-01f));
  p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(-3.761263490e-01f));
  p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(1.283791661e-01f));
  const __m512 small = _mm512_fmadd_ps(a, p, a);

  // The large piece: 1 − e^(−a²)·Q(1/(1 + a)).
  const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(a_large, _mm512_set1_ps(1.0f)));
  __m512 q = _mm512_set1_ps(9.862750769e-01f);
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-3.365885496e+00f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(4.643396378e+00f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-2.893325806e+00f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(3.245364726e-01f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(1.748241186e-01f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(5.760482550e-01f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(5.634425282e-01f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(2.041583866e-05f));
  const __m512 a2_error = _mm512_fmsub_ps(a_large, a_large, a2_large);  // a·a − a2, exactly
  // e^(−a² − error) = e^(−a2)·e^(−error) ≈ e^(−a2)·(1 − error): |error| ≤ 2⁻²⁴·a2.
  const __m512 e_rounded = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), a2_large));
  const __m512 e = _mm512_fnmadd_ps(e_rounded, a2_error, e_rounded);
  const __m512 large = _mm512_fnmadd_ps(e, q, _mm512_set1_ps(1.0f));

  const __mmask16 is_small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.921875f), _CMP_LT_OQ);
  const __m512 magnitude = _mm512_mask_blend_ps(is_small, large, small);
  const __m512i magnitude_bits = _mm512_castps_si512(magnitude);
  return _mm512_castsi512_ps(_mm512_mask_or_epi32(magnitude_bits, kAll, magnitude_bits, sign));
}

}  // namespace ember::kernels::cpu
