// e^x for 16 floats in AVX-512 registers, within 2 ulp of std::exp over the whole f32 range, for the
// softmax inside the fused attention (kernels/cpu/attention.cpp), whose exponentials cost as much
// as its products when each is a libm call.
//
// Cody and Waite's reduction: x = n·ln 2 + r with n = round(x/ln 2) and |r| ≤ ln 2/2 (ln 2 split in
// two parts so that n·ln2_high is exact), e^r by the degree-6 polynomial of Cephes' expf, then
// scaled by 2^n with VSCALEFPS, which also gives +∞ above the range and 0 below it. −∞ gives 0
// exactly (x is raised to −120 first, where 2^n·e^r already rounds to zero: the smallest denormal is
// 2^−149 ≈ e^−103.3), NaN
// stays NaN (VMAXPS returns its second operand, x, when x is NaN).
#pragma once

#include <immintrin.h>

namespace ember::kernels::cpu {

// The masked forms with every lane set, because their plain forms pass GCC 12 an undefined source
// operand that -Wmaybe-uninitialized reports (GCC bug 105593).
__attribute__((target("avx512f"))) inline __m512 exp_avx512(__m512 x) {
  constexpr __mmask16 kAll = 0xffff;
  x = _mm512_mask_max_ps(x, kAll, _mm512_set1_ps(-120.0f), x);
  const __m512 n = _mm512_mask_roundscale_ps(x, kAll, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_mask_scalef_ps(p, kAll, p, n);
}

}  // namespace ember::kernels::cpu
