// Sixteen f32 lanes as one number, so that a per-element formula of kernels/elementwise_math.h
// compiles for AVX-512 as it is written (Note [formulas on lanes]).
//
// Note [formulas on lanes]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// GCC vectorizes a loop of +, −, ×, ÷ by itself, but not one that calls erff or expf: the loop
// calls libm once per element, and exact GELU's erf took as long as the transformer's MLP GEMMs.
// So a formula that needs them runs on F32x16: its T is this type, its arithmetic is GCC's
// vector extension, its constants T(c) are c rounded to f32 in every lane (as T(c) is for
// float), and math::exp and math::erf find lanes_exp and lanes_erf here through the argument's
// namespace (exp_avx512.h, erf_avx512.h: within 1 ulp of the correctly rounded value). The
// formula is still written once (Note [one formula per op]); it gives the float formula's
// operations in the same order, with e^x and erf within an ulp of libm's.
//
// The loop that runs a formula on lanes is compiled with target("avx512f") and flatten, so that
// the formula, these operators and the AVX-512 functions are all inlined into it (their own
// out-of-line copies would pass 64-byte vectors without AVX-512, which GCC refuses), and it runs
// only where cpu_has_avx512f() says so (Note [CPU dispatch]). Its last, partial group of lanes is
// loaded and stored with a mask, so that every element goes through the same lanes whatever the
// thread count cuts (Note [CPU threads]).
#pragma once

#include <immintrin.h>

#include "kernels/cpu/erf_avx512.h"
#include "kernels/cpu/exp_avx512.h"

namespace ember::kernels::cpu::lanes {

using V16sf = float __attribute__((vector_size(64)));

struct F32x16 {
  V16sf v;
  F32x16() = default;
  explicit F32x16(const V16sf& lanes) : v(lanes) {}
  explicit F32x16(double c) : v(V16sf{} + static_cast<float>(c)) {}
};

inline F32x16 operator+(const F32x16& a, const F32x16& b) { return F32x16(a.v + b.v); }
inline F32x16 operator-(const F32x16& a, const F32x16& b) { return F32x16(a.v - b.v); }
inline F32x16 operator*(const F32x16& a, const F32x16& b) { return F32x16(a.v * b.v); }
inline F32x16 operator/(const F32x16& a, const F32x16& b) { return F32x16(a.v / b.v); }
inline F32x16 operator-(const F32x16& a) { return F32x16(-a.v); }

__attribute__((target("avx512f"))) inline F32x16 lanes_exp(const F32x16& x) { return F32x16(exp_avx512(x.v)); }
__attribute__((target("avx512f"))) inline F32x16 lanes_erf(const F32x16& x) { return F32x16(erf_avx512(x.v)); }

// The first `count` ≤ 16 floats at p, the other lanes 0; and their store.
__attribute__((target("avx512f"))) inline F32x16 load(const float* p, std::size_t count) {
  return F32x16(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1u), p));
}
__attribute__((target("avx512f"))) inline void store(float* p, const F32x16& x, std::size_t count) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1u), x.v);
}

}  // namespace ember::kernels::cpu::lanes
