// The per-element formulas of the elementwise ops, activations and their gradients, each written
// once as a host-and-device function that both backends call.
//
// Note [one formula per op]
// A formula written twice — once in a CPU loop, once in a CUDA kernel — drifts: the two LeakyReLU
// twins once disagreed on −0. So every per-element formula lives in a *_math.h header (this one,
// optim_math.h for the optimizers, softmax_math.h for the losses), compiled as host code by the C++
// compiler and as host and device code by nvcc, and the CPU loops and the CUDA kernels both call
// it; neither backend spells a formula out. The backends are generic over the ops: the CPU map
// loops and the CUDA map kernels take the op as a template parameter (with_unary_op and friends
// turn the run-time enum into one), so each loop is compiled for its formula and vectorizes.
// Results agree bit for bit wherever the formula is exact in IEEE arithmetic (negation, ReLU,
// LeakyReLU, +, −, ×, ÷, √) — tests check it on ±0, ±∞, NaN and denormals — and within an ulp or
// two elsewhere: CUDA's expf, logf, tanhf and powf are not glibc's, and nvcc contracts a·b + c into
// one fused multiply-add where GCC rounds twice (affine, the pixel normalization).
//
// Adding an elementwise op: its enum value, its formula and its case in the visitor, all here;
// then the op in core/ops/ (ops.h and elementwise.cpp), its test, and its row in docs/ops.md.
#pragma once

#include <math.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/base/half.h"
#include "kernels/common.h"

namespace ember::kernels {

enum class UnaryOp : std::uint8_t {
  neg,
  exp,
  log,
  sqrt,
  sigmoid,
  tanh,
  relu,
  leaky_relu,
  pow,
  affine,
  erf,
  rsqrt,
  abs,
  clamp
};
// maximum and minimum propagate NaN (as PyTorch's do); the *_share ops are their derivatives'
// weights for the first operand: 1 where it alone is the extreme, ½ where the two tie, 0 otherwise.
// gt ... ne give 1 or 0 (comparisons with NaN give 0, ne gives 1).
enum class BinaryOp : std::uint8_t {
  add,
  sub,
  mul,
  div,
  maximum,
  minimum,
  maximum_share,
  minimum_share,
  gt,
  lt,
  ge,
  le,
  eq,
  ne
};
// The derivative of an activation from the upstream gradient dy and a saved tensor: the
// activation's output y for relu, sigmoid, tanh and rsqrt; its input x for leaky_relu (whose
// output loses the sign when the slope is negative or zero), erf, abs and clamp.
enum class ActivationGrad : std::uint8_t { relu, sigmoid, tanh, leaky_relu, erf, rsqrt, abs, clamp };

// The ops' parameters: leaky_relu a = negative slope; pow a = exponent; affine x·a + b; clamp to
// [a, b] (±∞ for a bound not given).
template <class T>
struct OpArgs {
  T a = 0, b = 0;
};

namespace math {
// The C library's functions by type, on the host and on the device alike.
EMBER_HOST_DEVICE float exp(float x) { return ::expf(x); }
EMBER_HOST_DEVICE double exp(double x) { return ::exp(x); }
EMBER_HOST_DEVICE float log(float x) { return ::logf(x); }
EMBER_HOST_DEVICE double log(double x) { return ::log(x); }
EMBER_HOST_DEVICE float sqrt(float x) { return ::sqrtf(x); }
EMBER_HOST_DEVICE double sqrt(double x) { return ::sqrt(x); }
EMBER_HOST_DEVICE float tanh(float x) { return ::tanhf(x); }
EMBER_HOST_DEVICE double tanh(double x) { return ::tanh(x); }
EMBER_HOST_DEVICE float pow(float x, float y) { return ::powf(x, y); }
EMBER_HOST_DEVICE double pow(double x, double y) { return ::pow(x, y); }
EMBER_HOST_DEVICE float erf(float x) { return ::erff(x); }
EMBER_HOST_DEVICE double erf(double x) { return ::erf(x); }
}  // namespace math

template <UnaryOp Op, class T>
EMBER_HOST_DEVICE T unary_formula(T x, OpArgs<T> args) {
  if constexpr (Op == UnaryOp::neg)
    return -x;
  else if constexpr (Op == UnaryOp::exp)
    return math::exp(x);
  else if constexpr (Op == UnaryOp::log)
    return math::log(x);
  else if constexpr (Op == UnaryOp::sqrt)
    return math::sqrt(x);
  else if constexpr (Op == UnaryOp::sigmoid)
    return T(1) / (T(1) + math::exp(-x));
  else if constexpr (Op == UnaryOp::tanh)
    return math::tanh(x);
  else if constexpr (Op == UnaryOp::relu)
    return x > T(0) ? x : T(0);
  // A product with a selected factor rather than a select of two products: −0 stays −0 (as in
  // PyTorch) and the CPU loop vectorizes (GCC keeps a multiply inside a select arm scalar).
  else if constexpr (Op == UnaryOp::leaky_relu)
    return x * (x > T(0) ? T(1) : args.a);
  else if constexpr (Op == UnaryOp::pow)
    return args.a == T(2) ? x * x : math::pow(x, args.a);
  else if constexpr (Op == UnaryOp::erf)
    return math::erf(x);
  else if constexpr (Op == UnaryOp::rsqrt)
    return T(1) / math::sqrt(x);  // not the device's approximate rsqrtf: the CPU twin's value
  else if constexpr (Op == UnaryOp::abs)
    return x < T(0) ? -x : (x == T(0) ? T(0) : x);  // −0 gives +0, NaN stays NaN
  else if constexpr (Op == UnaryOp::clamp)
    return x != x ? x : (x < args.a ? args.a : (x > args.b ? args.b : x));  // NaN stays NaN
  else
    return x * args.a + args.b;  // affine
}

template <BinaryOp Op, class T>
EMBER_HOST_DEVICE T binary_formula(T a, T b) {
  if constexpr (Op == BinaryOp::add)
    return a + b;
  else if constexpr (Op == BinaryOp::sub)
    return a - b;
  else if constexpr (Op == BinaryOp::mul)
    return a * b;
  else if constexpr (Op == BinaryOp::div)
    return a / b;
  else if constexpr (Op == BinaryOp::maximum)
    return a != a ? a : (b != b ? b : (a > b ? a : b));
  else if constexpr (Op == BinaryOp::minimum)
    return a != a ? a : (b != b ? b : (a < b ? a : b));
  else if constexpr (Op == BinaryOp::maximum_share)
    return a > b ? T(1) : (a == b ? T(0.5) : T(0));
  else if constexpr (Op == BinaryOp::minimum_share)
    return a < b ? T(1) : (a == b ? T(0.5) : T(0));
  else if constexpr (Op == BinaryOp::gt)
    return a > b ? T(1) : T(0);
  else if constexpr (Op == BinaryOp::lt)
    return a < b ? T(1) : T(0);
  else if constexpr (Op == BinaryOp::ge)
    return a >= b ? T(1) : T(0);
  else if constexpr (Op == BinaryOp::le)
    return a <= b ? T(1) : T(0);
  else if constexpr (Op == BinaryOp::eq)
    return a == b ? T(1) : T(0);
  else
    return a != b ? T(1) : T(0);  // ne
}

template <ActivationGrad Op, class T>
EMBER_HOST_DEVICE T activation_grad_formula(T dy, T saved, OpArgs<T> args) {
  if constexpr (Op == ActivationGrad::relu)
    return saved > T(0) ? dy : T(0);
  else if constexpr (Op == ActivationGrad::sigmoid)
    return dy * saved * (T(1) - saved);
  else if constexpr (Op == ActivationGrad::tanh)
    return dy * (T(1) - saved * saved);
  else if constexpr (Op == ActivationGrad::leaky_relu)
    return dy * (saved > T(0) ? T(1) : args.a);  // from x
  else if constexpr (Op == ActivationGrad::erf)
    return dy * T(1.1283791670955126) * math::exp(-saved * saved);  // 2/√π·e^(−x²), from x
  else if constexpr (Op == ActivationGrad::rsqrt)
    return dy * T(-0.5) * saved * saved * saved;  // −½·y³, from y = x^(−½)
  else if constexpr (Op == ActivationGrad::abs)
    return saved > T(0) ? dy : (saved < T(0) ? -dy : T(0));  // sign(x), 0 at 0 (PyTorch's)
  else
    return saved >= args.a && saved <= args.b ? dy : T(0);  // clamp: 1 inside [a, b], bounds included
}

// out = cond ? a : b (where).
template <class T>
EMBER_HOST_DEVICE T select_formula(std::uint8_t cond, T a, T b) {
  return cond ? a : b;
}

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;
// The type a kernel computes in for elements of type T: f32 for bf16 and f16 (PyTorch's "opmath"
// type), T itself otherwise. A 16-bit kernel widens each element exactly, applies the f32 formula
// and rounds once: the bits of the f32 kernel on widened copies (Note [half precision]).
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

// A conversion between element types. Floating point to an integer type truncates toward zero
// as C++ does, and where C++ leaves the result undefined it follows the GPU's saturating
// conversion instructions: NaN gives 0, values beyond the type's range give its limit (−1e10 →
// INT32_MIN, 300 → 255 for u8). Integers to narrower integers wrap, as in C++. bf16 and f16 go
// through f32 both ways (Note [half conversions] in core/base/half.h).
template <class From, class To>
EMBER_HOST_DEVICE To cast_formula(From x) {
  if constexpr (is_half_v<From>) {
    return cast_formula<float, To>(static_cast<float>(x));  // exact, then as from f32
  } else if constexpr (is_half_v<To>) {
    return To(static_cast<float>(x));  // through f32, as PyTorch (Note [half conversions])
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    constexpr To lo = std::numeric_limits<To>::min(), hi = std::numeric_limits<To>::max();
    if (x != x) return To(0);
    if (x <= static_cast<From>(lo)) return lo;
    if (x >= static_cast<From>(hi)) return hi;  // hi may round up to 2^k in From: then x ≥ 2^k is out of range too
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

// The data pipeline's pixel scaling (x/255 − mean)/std as one multiply-add, its two constants
// computed the same way for every backend and loader.
struct PixelScaling {
  float scale, shift;
};
EMBER_HOST_DEVICE PixelScaling pixel_scaling(float mean, float std) { return {1.0f / (255.0f * std), -mean / std}; }
EMBER_HOST_DEVICE float scale_pixel(std::uint8_t x, PixelScaling s) {
  return static_cast<float>(x) * s.scale + s.shift;
}

// Run-time op → compile-time op: f(std::integral_constant<Op, op>{}), so that each backend
// compiles one loop (or kernel) per formula. Host code only.
template <class F>
void with_unary_op(UnaryOp op, F&& f) {
  using U = UnaryOp;
  switch (op) {
    case U::neg:
      return f(std::integral_constant<U, U::neg>{});
    case U::exp:
      return f(std::integral_constant<U, U::exp>{});
    case U::log:
      return f(std::integral_constant<U, U::log>{});
    case U::sqrt:
      return f(std::integral_constant<U, U::sqrt>{});
    case U::sigmoid:
      return f(std::integral_constant<U, U::sigmoid>{});
    case U::tanh:
      return f(std::integral_constant<U, U::tanh>{});
    case U::relu:
      return f(std::integral_constant<U, U::relu>{});
    case U::leaky_relu:
      return f(std::integral_constant<U, U::leaky_relu>{});
    case U::pow:
      return f(std::integral_constant<U, U::pow>{});
    case U::affine:
      return f(std::integral_constant<U, U::affine>{});
    case U::erf:
      return f(std::integral_constant<U, U::erf>{});
    case U::rsqrt:
      return f(std::integral_constant<U, U::rsqrt>{});
    case U::abs:
      return f(std::integral_constant<U, U::abs>{});
    case U::clamp:
      return f(std::integral_constant<U, U::clamp>{});
  }
}

template <class F>
void with_binary_op(BinaryOp op, F&& f) {
  using B = BinaryOp;
  switch (op) {
    case B::add:
      return f(std::integral_constant<B, B::add>{});
    case B::sub:
      return f(std::integral_constant<B, B::sub>{});
    case B::mul:
      return f(std::integral_constant<B, B::mul>{});
    case B::div:
      return f(std::integral_constant<B, B::div>{});
    case B::maximum:
      return f(std::integral_constant<B, B::maximum>{});
    case B::minimum:
      return f(std::integral_constant<B, B::minimum>{});
    case B::maximum_share:
      return f(std::integral_constant<B, B::maximum_share>{});
    case B::minimum_share:
      return f(std::integral_constant<B, B::minimum_share>{});
    case B::gt:
      return f(std::integral_constant<B, B::gt>{});
    case B::lt:
      return f(std::integral_constant<B, B::lt>{});
    case B::ge:
      return f(std::integral_constant<B, B::ge>{});
    case B::le:
      return f(std::integral_constant<B, B::le>{});
    case B::eq:
      return f(std::integral_constant<B, B::eq>{});
    case B::ne:
      return f(std::integral_constant<B, B::ne>{});
  }
}

template <class F>
void with_activation_grad(ActivationGrad op, F&& f) {
  using A = ActivationGrad;
  switch (op) {
    case A::relu:
      return f(std::integral_constant<A, A::relu>{});
    case A::sigmoid:
      return f(std::integral_constant<A, A::sigmoid>{});
    case A::tanh:
      return f(std::integral_constant<A, A::tanh>{});
    case A::leaky_relu:
      return f(std::integral_constant<A, A::leaky_relu>{});
    case A::erf:
      return f(std::integral_constant<A, A::erf>{});
    case A::rsqrt:
      return f(std::integral_constant<A, A::rsqrt>{});
    case A::abs:
      return f(std::integral_constant<A, A::abs>{});
    case A::clamp:
      return f(std::integral_constant<A, A::clamp>{});
  }
}

}  // namespace ember::kernels
