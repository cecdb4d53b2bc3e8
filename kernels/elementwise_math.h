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
// Note [op lists]
// ~~~~~~~~~~~~~~~
// Each kind of elementwise op is one X-macro list below, and everything that enumerates the ops
// is generated from it: the enums, the visitors that turn a run-time op into a compile-time one,
// the names tests and errors print, the counts. An activation's entry also generates its public
// function, its derivative's wiring and its autocast policy line in core/ops/ (ops.h,
// unary.cpp, op_list.h). Adding an activation without arguments touches three files: its entry
// and its two formulas (the value, and the derivative in activation_grad_formula) here, its sample
// in tests/support/op_table_elementwise.cpp (with its PyTorch spelling), and its row in
// docs/ops.md; a fourth, tests/interop/autocast_mode_2x_lists.h, where PyTorch lists the op for
// autocast (softplus: CUDA's f32 list). Every op-wide test (gradcheck, CPU f32 against f64, CUDA
// against the CPU, PyTorch, autocast, the docs) then covers it.
#pragma once

#include <math.h>

#include <cstdint>
#include <iterator>
#include <limits>
#include <type_traits>
#include <utility>

#include "base/half.h"
#include "kernels/common.h"

namespace ember::kernels {

// Unary ops whose derivative core/ops/unary.cpp writes with other ops: X(name).
#define EMBER_UNARY_OPS_COMPOSED(X) X(neg) X(exp) X(log) X(sqrt) X(pow) X(affine)
// Activations: unary ops whose derivative is activation_grad_formula's case of the same name, from
// the saved input x (input), the saved output y (output), or only y's sign (output_sign: its 16-bit
// gradient on CUDA needs no widened copy). X(name, saved, cuda_autocast): cuda_autocast is the
// autocast policy on CUDA (PyTorch's lists, Note [autocast policy]); on the CPU it is none. These
// take no arguments: ember::name(x) is generated for each.
#define EMBER_ACTIVATIONS(X) \
  X(sigmoid, output, none)   \
  X(tanh, output, none)      \
  X(relu, output_sign, none) \
  X(erf, input, none)        \
  X(gelu, input, none)       \
  X(rsqrt, output, fp32)     \
  X(abs, input, none)        \
  X(softplus, input, fp32)
// Activations with arguments (OpArgs below), their public functions written by hand: X(name).
#define EMBER_ACTIVATIONS_WITH_ARGS(X) X(leaky_relu) X(clamp)
// maximum and minimum propagate NaN (as PyTorch's do); the *_share ops are their derivatives'
// weights for the first operand: 1 where it alone is the extreme, ½ where the two tie, 0 otherwise.
// gt ... ne give 1 or 0 (comparisons with NaN give 0, ne gives 1).
#define EMBER_BINARY_OPS(X) \
  X(add)                    \
  X(sub) X(mul) X(div) X(maximum) X(minimum) X(maximum_share) X(minimum_share) X(gt) X(lt) X(ge) X(le) X(eq) X(ne)

#define EMBER_NAME_ONLY(name, ...) name,
enum class UnaryOp : std::uint8_t {
  EMBER_UNARY_OPS_COMPOSED(EMBER_NAME_ONLY) EMBER_ACTIVATIONS(EMBER_NAME_ONLY)
      EMBER_ACTIVATIONS_WITH_ARGS(EMBER_NAME_ONLY)
};
enum class BinaryOp : std::uint8_t { EMBER_BINARY_OPS(EMBER_NAME_ONLY) };
// The derivative of an activation from the upstream gradient dy and the saved tensor its entry
// names.
enum class ActivationGrad : std::uint8_t {
  EMBER_ACTIVATIONS(EMBER_NAME_ONLY) EMBER_ACTIVATIONS_WITH_ARGS(EMBER_NAME_ONLY)
};
#undef EMBER_NAME_ONLY

// Every op of a kind, in its enum's order, and their names: for tests and messages.
#define EMBER_OP_VALUE(name, ...) Kind::name,
#define EMBER_OP_NAME(name, ...) #name,
template <class Kind>
struct OpList;
template <>
struct OpList<UnaryOp> {
  using Kind = UnaryOp;
  static constexpr Kind all[] = {EMBER_UNARY_OPS_COMPOSED(EMBER_OP_VALUE) EMBER_ACTIVATIONS(EMBER_OP_VALUE)
                                     EMBER_ACTIVATIONS_WITH_ARGS(EMBER_OP_VALUE)};
  static constexpr const char* names[] = {EMBER_UNARY_OPS_COMPOSED(EMBER_OP_NAME) EMBER_ACTIVATIONS(EMBER_OP_NAME)
                                              EMBER_ACTIVATIONS_WITH_ARGS(EMBER_OP_NAME)};
};
template <>
struct OpList<BinaryOp> {
  using Kind = BinaryOp;
  static constexpr Kind all[] = {EMBER_BINARY_OPS(EMBER_OP_VALUE)};
  static constexpr const char* names[] = {EMBER_BINARY_OPS(EMBER_OP_NAME)};
};
template <>
struct OpList<ActivationGrad> {
  using Kind = ActivationGrad;
  static constexpr Kind all[] = {EMBER_ACTIVATIONS(EMBER_OP_VALUE) EMBER_ACTIVATIONS_WITH_ARGS(EMBER_OP_VALUE)};
  static constexpr const char* names[] = {EMBER_ACTIVATIONS(EMBER_OP_NAME) EMBER_ACTIVATIONS_WITH_ARGS(EMBER_OP_NAME)};
};
#undef EMBER_OP_VALUE
#undef EMBER_OP_NAME
template <class Kind>
constexpr const char* op_name(Kind op) {
  return OpList<Kind>::names[static_cast<std::size_t>(op)];
}

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
EMBER_HOST_DEVICE float log1p(float x) { return ::log1pf(x); }
EMBER_HOST_DEVICE double log1p(double x) { return ::log1p(x); }
// A number of several lanes (kernels/cpu/lanes_f32x16.h) brings its own, found through its
// namespace (Note [formulas on lanes]).
template <class V>
requires requires(V v) { lanes_exp(v); }
V exp(const V& x) { return lanes_exp(x); }
template <class V>
requires requires(V v) { lanes_erf(v); }
V erf(const V& x) { return lanes_erf(x); }
}  // namespace math

// Φ(x), the standard normal distribution's CDF: exact GELU's factor.
template <class T>
EMBER_HOST_DEVICE T normal_cdf(T x) {
  return T(0.5) * (T(1) + math::erf(x * T(0.70710678118654752)));
}

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
  else if constexpr (Op == UnaryOp::gelu)
    return x * normal_cdf(x);  // exact GELU (PyTorch's approximate="none")
  else if constexpr (Op == UnaryOp::rsqrt)
    return T(1) / math::sqrt(x);  // not the device's approximate rsqrtf: the CPU twin's value
  else if constexpr (Op == UnaryOp::abs)
    return x < T(0) ? -x : (x == T(0) ? T(0) : x);  // −0 gives +0, NaN stays NaN
  else if constexpr (Op == UnaryOp::clamp)
    return x != x ? x : (x < args.a ? args.a : (x > args.b ? args.b : x));  // NaN stays NaN
  else if constexpr (Op == UnaryOp::softplus)
    return x > T(20) ? x : math::log1p(math::exp(x));  // PyTorch's, beta 1 and threshold 20
  else {
    static_assert(Op == UnaryOp::affine, "a unary op without a formula");
    return x * args.a + args.b;
  }
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
  else {
    static_assert(Op == BinaryOp::ne, "a binary op without a formula");
    return a != b ? T(1) : T(0);
  }
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
  // Φ(x) + x·φ(x), φ the standard normal density, from x (PyTorch's GeluBackward).
  else if constexpr (Op == ActivationGrad::gelu)
    return dy * (normal_cdf(saved) + saved * T(0.39894228040143268) * math::exp(T(-0.5) * saved * saved));
  else if constexpr (Op == ActivationGrad::rsqrt)
    return dy * T(-0.5) * saved * saved * saved;  // −½·y³, from y = x^(−½)
  else if constexpr (Op == ActivationGrad::abs)
    return saved > T(0) ? dy : (saved < T(0) ? -dy : T(0));  // sign(x), 0 at 0 (PyTorch's)
  else if constexpr (Op == ActivationGrad::clamp)
    return saved > args.a && saved < args.b ? dy : T(0);  // 1 strictly inside (a, b), PyTorch 2's
  else {
    static_assert(Op == ActivationGrad::softplus, "an activation without a derivative");
    const T z = math::exp(saved);  // PyTorch's softplus_backward: dy·z/(z + 1), from x
    return saved > T(20) ? dy : dy * z / (z + T(1));
  }
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
// through f32 both ways (Note [half conversions] in base/half.h).
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
template <class Kind, class F>
void with_op(Kind op, F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (void)((op == OpList<Kind>::all[I] ? (f(std::integral_constant<Kind, OpList<Kind>::all[I]>{}), true) : false) ||
           ...);
  }
  (std::make_index_sequence<std::size(OpList<Kind>::all)>{});
}
template <class F>
void with_unary_op(UnaryOp op, F&& f) {
  with_op(op, std::forward<F>(f));
}
template <class F>
void with_binary_op(BinaryOp op, F&& f) {
  with_op(op, std::forward<F>(f));
}
template <class F>
void with_activation_grad(ActivationGrad op, F&& f) {
  with_op(op, std::forward<F>(f));
}

}  // namespace ember::kernels
