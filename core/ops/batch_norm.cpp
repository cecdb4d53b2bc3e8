// Batch normalization: the op and its derivative rule, on the CPU and CUDA kernels of
// kernels/conv.h (16-bit inputs through f32 copies).
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/conv.h"

namespace ember {
namespace {

using autograd::Gradients;
using autograd::NeedsGrad;

std::size_t at(const Shape& s, std::size_t i) { return static_cast<std::size_t>(s[i]); }

// A bf16/f16 input, in f32 (Note [half precision]). Its parameters and running statistics may be
// in its dtype or in f32, as PyTorch's mixed batch norm allows (a model under autocast keeps them
// in f32); statistics in a 16-bit dtype are updated through f32 copies.
Tensor half_batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, bool training, double momentum, double eps) {
  for (const ext::Arg& a : {ext::Arg{"weight", weight}, ext::Arg{"bias", bias}, ext::Arg{"running_mean", running_mean},
                            ext::Arg{"running_var", running_var}}) {
    EMBER_CHECK(a.tensor.dtype() == input.dtype() || a.tensor.dtype() == DType::f32, DTypeError, "batch_norm: with a ",
                input.dtype(), " input, '", a.name, "' must be ", input.dtype(), " or f32, but it has dtype ",
                a.tensor.dtype());
  }
  Tensor mean32 = ext::widened(running_mean), var32 = ext::widened(running_var);
  const Tensor y =
      batch_norm(ext::widened(input), ext::widened(weight), ext::widened(bias), mean32, var32, training, momentum, eps);
  if (training && !mean32.is_same(running_mean)) running_mean.copy_(mean32.to(running_mean.dtype()));
  if (training && !var32.is_same(running_var)) running_var.copy_(var32.to(running_var.dtype()));
  return y.to(input.dtype());
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  ext::check_defined(op, {"input", input});
  ext::check_same_device(op, {{"input", input},
                              {"weight", weight},
                              {"bias", bias},
                              {"running_mean", running_mean},
                              {"running_var", running_var}});
  ext::check_floating(op, {"input", input});
  EMBER_CHECK(input.dim() == 4 || input.dim() == 2, ShapeError, op, ": expects [N, C, H, W] or [N, C], got ",
              shape_str(input.shape()));
  if (is_half(input.dtype()))
    return half_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps);
  const std::size_t n = at(input.shape(), 0), c = at(input.shape(), 1);
  const std::size_t hw = input.dim() == 4 ? at(input.shape(), 2) * at(input.shape(), 3) : 1;
  for (const ext::Arg& a : {ext::Arg{"weight", weight}, ext::Arg{"bias", bias}, ext::Arg{"running_mean", running_mean},
                            ext::Arg{"running_var", running_var}}) {
    ext::check_same_dtype(op, {"input", input}, a);
    EMBER_CHECK(a.tensor.dim() == 1 && at(a.tensor.shape(), 0) == c, ShapeError, op, ": '", a.name,
                "' must have shape [", c, "], it has ", shape_str(a.tensor.shape()));
  }
  EMBER_CHECK(!training || n * hw > 1, ValueError, op, ": training needs more than one value per channel, got shape ",
              shape_str(input.shape()));
  Tensor y = ext::new_empty(input, input.shape());
  Tensor mean = ext::new_empty(input, {static_cast<std::int64_t>(c)});
  Tensor invstd = ext::new_empty(input, {static_cast<std::int64_t>(c)});
  ext::dispatch(
      input,
      [&](auto zero) {
        using T = decltype(zero);
        if (training)
          kernels::cpu::batch_norm_forward_train<T>(
              input.raw<T>(), weight.raw<T>(), bias.raw<T>(), y.raw<T>(), mean.raw<T>(), invstd.raw<T>(),
              running_mean.raw<T>(), running_var.raw<T>(), n, c, hw, static_cast<T>(momentum), static_cast<T>(eps));
        else
          kernels::cpu::batch_norm_forward_eval<T>(input.raw<T>(), weight.raw<T>(), bias.raw<T>(),
                                                   running_mean.raw<T>(), running_var.raw<T>(), y.raw<T>(), n, c, hw,
                                                   static_cast<T>(eps));
      },
      [&](auto stream) {
        if (training)
          kernels::cuda::batch_norm_forward_train(input.raw<float>(), weight.raw<float>(), bias.raw<float>(),
                                                  y.raw<float>(), mean.raw<float>(), invstd.raw<float>(),
                                                  running_mean.raw<float>(), running_var.raw<float>(), n, c, hw,
                                                  static_cast<float>(momentum), static_cast<float>(eps), stream);
        else
          kernels::cuda::batch_norm_forward_eval(input.raw<float>(), weight.raw<float>(), bias.raw<float>(),
                                                 running_mean.raw<float>(), running_var.raw<float>(), y.raw<float>(), n,
                                                 c, hw, static_cast<float>(eps), stream);
      });
  if (autograd::needs_recording({&input, &weight, &bias}) && !training) {
    // Evaluation: y = x·scale + shift per channel with constants from the running statistics,
    // so the rule is plain broadcasting arithmetic over [1, C, 1, 1].
    Shape channel_shape(static_cast<std::size_t>(input.dim()), 1);
    channel_shape[1] = static_cast<std::int64_t>(c);
    const std::vector<int> other_dims = input.dim() == 4 ? std::vector<int>{0, 2, 3} : std::vector<int>{0};
    autograd::record(
        y, op, {&input, &weight, &bias},
        [x = input.detach(), gamma = weight.detach(), rmean = running_mean.detach().clone(),
         rvar = running_var.detach().clone(), eps, channel_shape, other_dims](const Tensor& dy, NeedsGrad needs) {
          const Tensor invstd = pow(rvar + eps, -0.5).reshape(channel_shape);
          Gradients grads(3);
          if (needs[0]) grads[0] = dy * (gamma.reshape(channel_shape) * invstd);
          if (needs[1]) grads[1] = sum(dy * ((x - rmean.reshape(channel_shape)) * invstd), other_dims);
          if (needs[2]) grads[2] = sum(dy, other_dims);
          return grads;
        });
    return y;
  }
  if (autograd::needs_recording({&input, &weight, &bias})) {
    autograd::record(
        y, op, {&input, &weight, &bias},
        [x = input.detach(), gamma = weight.detach(), mean, invstd, n, c, hw](const Tensor& dy, NeedsGrad) {
          Tensor dx = ext::new_empty(x, x.shape());
          Tensor dgamma = ext::new_empty(x, {static_cast<std::int64_t>(c)});
          Tensor dbeta = ext::new_empty(x, {static_cast<std::int64_t>(c)});
          ext::dispatch(
              x,
              [&](auto zero) {
                using T = decltype(zero);
                kernels::cpu::batch_norm_backward<T>(dy.raw<T>(), x.raw<T>(), gamma.raw<T>(), mean.raw<T>(),
                                                     invstd.raw<T>(), dx.raw<T>(), dgamma.raw<T>(), dbeta.raw<T>(), n,
                                                     c, hw);
              },
              [&](auto stream) {
                kernels::cuda::batch_norm_backward(dy.raw<float>(), x.raw<float>(), gamma.raw<float>(),
                                                   mean.raw<float>(), invstd.raw<float>(), dx.raw<float>(),
                                                   dgamma.raw<float>(), dbeta.raw<float>(), n, c, hw, stream);
              });
          return Gradients{dx, dgamma, dbeta};
        });
  }
  return y;
}

}  // namespace ember
