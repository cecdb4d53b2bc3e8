// The 16-bit floating-point element types: bfloat16 (8 exponent bits, 7 mantissa bits: f32's
// range at 3 significant digits) and float16 (IEEE binary16: 5 and 10, up to 65504). Each holds
// its bits; arithmetic happens in f32 (a value converts to float implicitly), and a float, double
// or integer converts back explicitly, rounding once from f32.
//
// Note [half precision]
// DType::bf16 and DType::f16 are made, copied between devices, printed, saved and loaded as
// safetensors' BF16 and F16 (PyTorch loads them as they are), and cast to and from every other
// dtype with .to(dtype) on both devices. Every floating op takes them, as PyTorch's do: it
// computes in f32 and rounds its result to the inputs' dtype once (PyTorch's "opmath" type for
// both). Most ops do it literally — op(x) is op(x.to(f32)).to(x.dtype()), so their results are
// those of the f32 op rounded once, bit for bit, and their gradients likewise. The products
// (matmul, linear, fused::linear_relu) and convolutions in bf16 on a CPU with AVX512-BF16 run
// ember's bf16 kernels instead (kernels/gemm_bf16.h, Note [bf16 convolution]): products exact in
// f32, sums in f32 in the kernel's order, the result rounded once; so does the fused attention,
// which also rounds its probabilities to bf16 before they multiply V (Note [bf16 attention],
// PyTorch's rule for its CPU flash attention); on other CPUs (or with
// EMBER_NO_AVX512_BF16=1) they widen to f32 like the rest. f16 on the CPU is storage only: its
// products widen to f32. On CUDA the products (cuBLAS), the convolutions (cuDNN, Note [cuDNN math])
// and the unary maps whose gradients read only exact values take both 16-bit types themselves. An op's operands share
// one dtype: ember does not promote bf16 with f32 (PyTorch does); autocast casts at each op's
// boundary (core/ops/autocast.h) so that a model's ops meet one dtype.
//
// Note [half conversions]
// f32 → bfloat16 and f32 → float16 round to nearest, ties to even, as PyTorch's c10::BFloat16 and
// c10::Half do: NaN is handled before rounding (so a NaN whose payload sits in the dropped bits
// cannot round to infinity) and becomes the canonical quiet NaN, 0x7FC0 for bfloat16 and 0x7E00
// (sign kept) for float16; values past the largest finite one round to infinity; subnormal results
// are kept, never flushed (bfloat16 shares f32's exponent range, so f32's subnormals map onto its
// own; float16's start at 2^-24). The other way is exact. A double or an integer goes through f32
// first, as in PyTorch (a double can round twice). The CPU's AVX512-BF16 and AMX instructions
// treat subnormal inputs as zero and flush subnormal outputs: vector paths that use them differ
// from these scalar formulas there, and say so where they are written.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>

#include "base/host_device.h"

namespace ember {
namespace half_bits {

EMBER_HOST_DEVICE std::uint32_t of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

EMBER_HOST_DEVICE float to_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Note [half conversions]: bfloat16 is f32's upper half, rounded.
EMBER_HOST_DEVICE std::uint16_t bf16_from_f32(float f) {
  const std::uint32_t u = of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;      // NaN, before rounding
  const std::uint32_t round = 0x7fffu + ((u >> 16) & 1u);  // ties to the even upper half
  return static_cast<std::uint16_t>((u + round) >> 16);
}

EMBER_HOST_DEVICE float f32_from_bf16(std::uint16_t h) { return to_float(static_cast<std::uint32_t>(h) << 16); }

// Note [half conversions]: binary16, with its subnormals.
EMBER_HOST_DEVICE std::uint16_t f16_from_f32(float f) {
  const std::uint32_t u = of(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN, before rounding
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // ≥ 65520 rounds to ∞
  const std::uint32_t exponent = a >> 23;
  if (exponent < 113) {  // below 2^-14: a float16 subnormal, value / 2^-24 rounded to an integer
    const std::uint32_t shift = 126 - exponent;               // the f32 significand (24 bits) in units of 2^-24
    if (shift > 24) return static_cast<std::uint16_t>(sign);  // below half of 2^-24: ±0
    const std::uint32_t significand = (a & 0x7fffffu) | 0x800000u;
    std::uint32_t h = significand >> shift;
    const std::uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (h & 1u))) ++h;  // may carry into the smallest normal
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = ((exponent - 112) << 10) | ((a >> 13) & 0x3ffu);
  const std::uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
  return static_cast<std::uint16_t>(sign | h);
}

EMBER_HOST_DEVICE float f32_from_f16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return to_float(sign | 0x7f800000u | (mantissa << 13));  // ∞ and NaN (payload kept)
  if (exponent != 0) return to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // ±0 and subnormals: mantissa·2^-24, exact in f32.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

}  // namespace half_bits

// A 16-bit floating type of a Format (from_f32, to_f32 over its bits). Two formats, two types.
template <class Format>
struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  EMBER_HOST_DEVICE explicit Half(float f) : bits(Format::from_f32(f)) {}
  EMBER_HOST_DEVICE explicit Half(double d) : Half(static_cast<float>(d)) {}
  template <class I, class = decltype(static_cast<float>(I{}) + I{} % 2)>  // the integer types
  EMBER_HOST_DEVICE explicit Half(I i) : Half(static_cast<float>(i)) {}
  EMBER_HOST_DEVICE operator float() const { return Format::to_f32(bits); }
  static EMBER_HOST_DEVICE Half from_bits(std::uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16Format {
  static EMBER_HOST_DEVICE std::uint16_t from_f32(float f) { return half_bits::bf16_from_f32(f); }
  static EMBER_HOST_DEVICE float to_f32(std::uint16_t h) { return half_bits::f32_from_bf16(h); }
};
struct Float16Format {
  static EMBER_HOST_DEVICE std::uint16_t from_f32(float f) { return half_bits::f16_from_f32(f); }
  static EMBER_HOST_DEVICE float to_f32(std::uint16_t h) { return half_bits::f32_from_f16(h); }
};
using bfloat16 = Half<BFloat16Format>;
using float16 = Half<Float16Format>;

template <class Format>
std::ostream& operator<<(std::ostream& out, Half<Format> h) {
  return out << static_cast<float>(h);
}

}  // namespace ember
