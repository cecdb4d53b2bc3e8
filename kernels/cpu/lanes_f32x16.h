// Sixteen f32 lanes as one number, so that a per-element formula of kernels/elementwise_math.h
// compiles for AVX-512 as it is written (Note [formulas on lanes]).
//
// Note [formulas on lanes]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// GCC vectorizes a loop of +, −, ×, ÷ by itself, but not one that calls erff or expf: the loop
// calls libm once per element, and exact GELU's erf took as long as the transformer's MLP GEMMs.
// So a formula that needs them runs on F32x16: its T is this type, its arithmetic lane by lane,
// its constants T(c) are c rounded to f32 in every lane (as T(c) is for float), and math::exp and
// math::erf find lanes_exp and lanes_erf here through the argument's namespace (exp_avx512.h,
// erf_avx512.h: within 1 ulp of the correctly rounded value). The formula is still written once
// (Note [one formula per op]); it gives the float formula's operations in the same order, with eˣ
// and erf within an ulp of libm's.
//
// The loop that runs a formula on lanes is compiled with target("avx512f") and flatten: the
// formula and these operators are inlined into it, and GCC makes each lane-by-lane loop one
// AVX-512 instruction. The lanes are an array of floats, not a vector type, so that a call that is
// not inlined (a build without optimization does not flatten) passes them in memory whatever the
// instruction set of either side: a 64-byte vector passed by value changes registers between
// AVX-512 code and the baseline's, and such a build computed garbage. The loop runs only where
// cpu_has_avx512f() says so (Note [CPU dispatch]); its last, partial group of lanes is loaded and
// stored with a mask, so that every element goes through the same lanes whatever the thread count
// cuts (Note [CPU threads]).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <functional>

#include "kernels/cpu/erf_avx512.h"
#include "kernels/cpu/exp_avx512.h"

namespace ember::kernels::cpu::lanes {

struct F32x16 {
  float lane[16];
  F32x16() = default;
  explicit F32x16(double c) {
    for (float& x : lane) x = static_cast<float>(c);
  }
};

template <class Op>
F32x16 lane_by_lane(const F32x16& a, const F32x16& b, Op op) {
  F32x16 out;
  for (int i = 0; i < 16; ++i) out.lane[i] = op(a.lane[i], b.lane[i]);
  return out;
}
inline F32x16 operator+(const F32x16& a, const F32x16& b) { return lane_by_lane(a, b, std::plus<float>()); }
inline F32x16 operator-(const F32x16& a, const F32x16& b) { return lane_by_lane(a, b, std::minus<float>()); }
inline F32x16 operator*(const F32x16& a, const F32x16& b) { return lane_by_lane(a, b, std::multiplies<float>()); }
inline F32x16 operator/(const F32x16& a, const F32x16& b) { return lane_by_lane(a, b, std::divides<float>()); }
inline F32x16 operator-(const F32x16& a) {
  F32x16 out;
  for (int i = 0; i < 16; ++i) out.lane[i] = -a.lane[i];
  return out;
}

// The first `count` ≤ 16 floats at p, the other lanes 0; their store; a register's lanes.
__attribute__((target("avx512f"))) inline F32x16 from_register(__m512 x) {
  F32x16 out;
  _mm512_storeu_ps(out.lane, x);
  return out;
}
__attribute__((target("avx512f"))) inline F32x16 load(const float* p, std::size_t count) {
  return from_register(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1u), p));
}
__attribute__((target("avx512f"))) inline void store(float* p, const F32x16& x, std::size_t count) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1u), _mm512_loadu_ps(x.lane));
}

__attribute__((target("avx512f"))) inline F32x16 lanes_exp(const F32x16& x) {
  return from_register(exp_avx512(_mm512_loadu_ps(x.lane)));
}
__attribute__((target("avx512f"))) inline F32x16 lanes_erf(const F32x16& x) {
  return from_register(erf_avx512(_mm512_loadu_ps(x.lane)));
}

}  // namespace ember::kernels::cpu::lanes
