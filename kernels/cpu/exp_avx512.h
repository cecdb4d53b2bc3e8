// e^x and 2^t for 16 floats in AVX-512 registers. e^x is within 2 ulp of std::exp over the whole
// f32 range; it was written for the softmax inside the fused attention (kernels/cpu/attention.cpp),
// whose exponentials cost as much as its products when each is a libm call, and which now calls 2^t.
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

// 2^t for 16 floats, within 2 ulp of std::exp2 over the whole f32 range: t = n + f with n =
// round(t) and |f| ≤ 1/2 exact, 2^f by a degree-6 polynomial with constant term 1 (fitted here for
// the least largest relative error, 2.0e-9 on [−1/2, 1/2]), scaled by 2^n with VSCALEFPS. Four
// operations fewer than exp_avx512, whose reduction needs ln 2 in two parts: the fused attention's
// softmax calls it on (x − m)·log₂e, where x − m is exact for the scores near the row's maximum
// that carry its weight. −∞ gives 0 (t is raised to −200 first, where 2^n·2^f rounds to zero), NaN
// stays NaN, +∞ above the range.
__attribute__((target("avx512f"))) inline __m512 exp2_avx512(__m512 t) {
  constexpr __mmask16 kAll = 0xffff;
  t = _mm512_mask_max_ps(t, kAll, _mm512_set1_ps(-200.0f), t);
  const __m512 n = _mm512_mask_roundscale_ps(t, kAll, t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.5353341587e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3398872688e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6184378490e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5503323674e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022647738e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718246e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_mask_scalef_ps(p, kAll, p, n);
}

}  // namespace ember::kernels::cpu
