// Unary ops and activations: forward through kernels/elementwise.h (their formulas and the
// activations' derivatives in kernels/elementwise_math.h, Note [op lists]), derivative rules
// beside each forward. The binary ops and comparisons are in core/ops/elementwise.cpp.
#include <algorithm>

#include "core/ops/activation_grad.h"
#include "core/ops/autocast.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/elementwise.h"

namespace ember {
// Declared in core/ops/activation_grad.h.
Tensor activation_backward(kernels::ActivationGrad op, const Tensor& dy, const Tensor& saved, double a, double b) {
  if (ext::is_cpu_bf16(dy) && saved.dtype() == DType::bf16) {  // a kernel of its own: every step's activations
    Tensor dx = ext::new_empty(saved, saved.shape());
    kernels::cpu::activation_grad_bf16(op, dy.raw<bfloat16>(), saved.raw<bfloat16>(), dx.raw<bfloat16>(),
                                       static_cast<std::size_t>(saved.numel()),
                                       {static_cast<float>(a), static_cast<float>(b)});
    return dx;
  }
  // Note [half precision]; CUDA's kernel takes both 16-bit types itself.
  if (is_half(dy.dtype()) && (!dy.is_cuda() || saved.dtype() != dy.dtype()))
    return activation_backward(op, ext::widened(dy), ext::widened(saved), a, b).to(dy.dtype());
  Tensor dx = ext::new_empty(saved, saved.shape());
  const std::size_t n = static_cast<std::size_t>(saved.numel());
  constexpr auto overwrite = kernels::WriteMode::overwrite;
  ext::dispatch_with_cuda_half(
      saved,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::activation_grad<T>(op, dy.raw<T>(), saved.raw<T>(), dx.raw<T>(), n, overwrite,
                                         {static_cast<T>(a), static_cast<T>(b)});
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        kernels::cuda::activation_grad(op, dy.raw<T>(), saved.raw<T>(), dx.raw<T>(), n, overwrite,
                                       {static_cast<float>(a), static_cast<float>(b)}, stream);
      });
  return dx;
}

namespace {

using autograd::Gradients;
using autograd::NeedsGrad;
using kernels::ActivationGrad;
using kernels::UnaryOp;

// Note [half precision]: whether the op computes on widened copies (after its argument checks).
bool half_operand(const char* op, const Tensor& x) {
  ext::check_defined(op, {"input", x});
  ext::check_floating(op, {"input", x});
  return is_half(x.dtype());
}
// The same for a unary op whose gradient reads only exact values — its input, or its output's
// sign — so that computing it in 16 bits gives the widened op's bits: it widens on the CPU only, and
// CUDA's unary kernels take the 16-bit data themselves (no widened copies in a training step).
bool half_operand_on_cpu(const char* op, const Tensor& x) { return half_operand(op, x) && !x.is_cuda(); }

// y = op(x) into `out` when given (in place), else into a new tensor; args as kernels::OpArgs.
Tensor unary_kernel(UnaryOp op, const char* name, const Tensor& x, double a = 0, double b = 0, Tensor out = Tensor()) {
  ext::check_defined(name, {"input", x});
  ext::check_floating(name, {"input", x});
  if (!out.defined()) out = ext::new_empty(x, x.shape());
  const std::size_t n = static_cast<std::size_t>(x.numel());
  ext::dispatch_with_cuda_half(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::unary<T>(op, x.raw<T>(), out.raw<T>(), n, {static_cast<T>(a), static_cast<T>(b)});
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        using C = kernels::compute_t<T>;
        kernels::cuda::unary(op, x.raw<T>(), out.raw<T>(), n, {static_cast<C>(a), static_cast<C>(b)}, stream);
      });
  return out;
}

Tensor affine_kernel(const Tensor& x, double scale, double shift, Tensor out = Tensor()) {
  return unary_kernel(UnaryOp::affine, "affine", x, scale, shift, out);
}

// The saved tensor an activation's derivative reads (its entry in EMBER_ACTIVATIONS).
enum class Saved { input, output, output_sign };

// An op whose derivative comes from its input x and the op's arguments (activation_grad).
Tensor from_input(UnaryOp op, ActivationGrad grad_op, const char* name, const Tensor& x, double a = 0, double b = 0) {
  if (half_operand_on_cpu(name, x)) return from_input(op, grad_op, name, ext::widened(x), a, b).to(x.dtype());
  Tensor out = unary_kernel(op, name, x, a, b);
  if (autograd::needs_recording({&x})) {
    autograd::record(out, name, {&x}, [grad_op, x_saved = x.detach(), a, b](const Tensor& g, NeedsGrad) {
      return Gradients{activation_backward(grad_op, g, x_saved, a, b)};
    });
  }
  return out;
}

// An activation without arguments (Note [op lists]): its derivative from x, or from y.
Tensor activation(UnaryOp op, ActivationGrad grad_op, const char* name, Saved saved, const Tensor& x) {
  if (saved == Saved::input) return from_input(op, grad_op, name, x);
  // A gradient from y in 16 bits would read a rounded y: only the sign of y is exact.
  const bool widen = saved == Saved::output_sign ? half_operand_on_cpu(name, x) : half_operand(name, x);
  if (widen) return activation(op, grad_op, name, saved, ext::widened(x)).to(x.dtype());
  Tensor y = unary_kernel(op, name, x);
  if (autograd::needs_recording({&x})) {
    autograd::record(y, name, {&x}, [grad_op, y_saved = y.detach()](const Tensor& g, NeedsGrad) {
      return Gradients{activation_backward(grad_op, g, y_saved)};
    });
  }
  return y;
}

}  // namespace

Tensor affine(const Tensor& x, double scale, double shift) {
  if (half_operand_on_cpu("affine", x)) return affine(ext::widened(x), scale, shift).to(x.dtype());
  Tensor out = affine_kernel(x, scale, shift);
  if (autograd::needs_recording({&x})) {
    autograd::record(out, "affine", {&x}, [scale](const Tensor& g, NeedsGrad) {
      return Gradients{scale == 1.0 ? g : affine_kernel(g, scale, 0.0)};
    });
  }
  return out;
}

Tensor add(const Tensor& x, double other) { return affine(x, 1.0, other); }
Tensor mul(const Tensor& x, double other) { return affine(x, other, 0.0); }

Tensor neg(const Tensor& x) {
  if (half_operand_on_cpu("neg", x)) return neg(ext::widened(x)).to(x.dtype());
  Tensor out = unary_kernel(UnaryOp::neg, "neg", x);
  if (autograd::needs_recording({&x})) {
    autograd::record(out, "neg", {&x}, [](const Tensor& g, NeedsGrad) { return Gradients{neg(g)}; });
  }
  return out;
}

Tensor exp(const Tensor& x) {
  if (const ext::AutocastInputs cast{OpKey::exp, {&x}}) return exp(cast[0]);
  if (half_operand("exp", x)) return exp(ext::widened(x)).to(x.dtype());
  Tensor out = unary_kernel(UnaryOp::exp, "exp", x);
  if (autograd::needs_recording({&x})) {
    autograd::record(out, "exp", {&x}, [y = out.detach()](const Tensor& g, NeedsGrad) { return Gradients{mul(g, y)}; });
  }
  return out;
}

Tensor log(const Tensor& x) {
  if (const ext::AutocastInputs cast{OpKey::log, {&x}}) return log(cast[0]);
  if (half_operand_on_cpu("log", x)) return log(ext::widened(x)).to(x.dtype());
  Tensor out = unary_kernel(UnaryOp::log, "log", x);
  if (autograd::needs_recording({&x})) {
    autograd::record(out, "log", {&x},
                     [x_saved = x.detach()](const Tensor& g, NeedsGrad) { return Gradients{div(g, x_saved)}; });
  }
  return out;
}

Tensor sqrt(const Tensor& x) {
  if (half_operand("sqrt", x)) return sqrt(ext::widened(x)).to(x.dtype());
  Tensor out = unary_kernel(UnaryOp::sqrt, "sqrt", x);
  if (autograd::needs_recording({&x})) {
    autograd::record(out, "sqrt", {&x}, [y = out.detach()](const Tensor& g, NeedsGrad) {
      return Gradients{div(affine_kernel(g, 0.5, 0.0), y)};  // d√x/dx = 1/(2√x)
    });
  }
  return out;
}

Tensor pow(const Tensor& x, double exponent) {
  if (const ext::AutocastInputs cast{OpKey::pow, {&x}}) return pow(cast[0], exponent);
  if (half_operand("pow", x)) return pow(ext::widened(x), exponent).to(x.dtype());
  Tensor out = unary_kernel(UnaryOp::pow, "pow", x, exponent);
  if (autograd::needs_recording({&x})) {
    autograd::record(out, "pow", {&x}, [x_saved = x.detach(), exponent](const Tensor& g, NeedsGrad) {
      // d xᵖ/dx = p·xᵖ⁻¹
      return Gradients{mul(g, affine_kernel(pow(x_saved, exponent - 1.0), exponent, 0.0))};
    });
  }
  return out;
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  if (half_operand_on_cpu("leaky_relu", x)) return leaky_relu(ext::widened(x), negative_slope).to(x.dtype());
  Tensor out = unary_kernel(UnaryOp::leaky_relu, "leaky_relu", x, negative_slope);
  if (autograd::needs_recording({&x})) {
    autograd::record(out, "leaky_relu", {&x}, [x_saved = x.detach(), negative_slope](const Tensor& g, NeedsGrad) {
      return Gradients{activation_backward(ActivationGrad::leaky_relu, g, x_saved, negative_slope)};
    });
  }
  return out;
}

// Every activation without arguments, from its list (Note [op lists]).
#define EMBER_DEFINE_ACTIVATION(name, saved, cuda_autocast)                         \
  Tensor name(const Tensor& x) {                                                    \
    if (const ext::AutocastInputs cast{OpKey::name, {&x}}) return name(cast[0]);    \
    return activation(UnaryOp::name, ActivationGrad::name, #name, Saved::saved, x); \
  }
EMBER_ACTIVATIONS(EMBER_DEFINE_ACTIVATION)
#undef EMBER_DEFINE_ACTIVATION

Tensor clamp(const Tensor& x, double min, double max) {
  EMBER_CHECK(!(min > max), ValueError, "clamp: min (", min, ") is greater than max (", max, ")");
  return from_input(UnaryOp::clamp, ActivationGrad::clamp, "clamp", x, min, max);
}

Tensor& mul_(Tensor& input, double scale) {
  EMBER_CHECK(!(autograd::is_grad_enabled() && input.requires_grad()), AutogradError,
              "mul_: a tensor that requires grad cannot be modified in place while gradients are recorded; wrap "
              "the update in NoGradGuard");
  if (half_operand_on_cpu("mul_", input)) return input.copy_(mul(ext::widened(input), scale).to(input.dtype()));
  affine_kernel(input, scale, 0.0, input);
  return input;
}

}  // namespace ember
