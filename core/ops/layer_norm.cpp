// layer_norm: one kernel per direction on each device (kernels/layer_norm.h), the parameters'
// gradients as column sums by the sum op; 16-bit inputs through f32 copies.
#include "kernels/layer_norm.h"
#include "core/ops/autocast.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"

namespace ember {
namespace {

using autograd::Gradients;
using autograd::NeedsGrad;

constexpr const char* kOp = "layer_norm";

// The [rows, width] view: width the normalized shape's elements, rows the rest.
struct Rows {
  std::size_t rows, width;
};

Rows check_layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                      double eps) {
  ext::check_defined(kOp, {"input", input});
  ext::check_same_device(kOp, {{"input", input}, {"weight", weight}, {"bias", bias}});
  ext::check_floating(kOp, {"input", input});
  const std::size_t k = normalized_shape.size();
  bool trailing = k > 0 && input.shape().size() >= k;
  for (std::size_t i = 0; trailing && i < k; ++i)
    trailing = normalized_shape[i] > 0 && input.shape()[input.shape().size() - k + i] == normalized_shape[i];
  EMBER_CHECK(trailing, ShapeError, kOp, ": normalized_shape ", shape_str(normalized_shape),
              " must be non-empty, positive and end the input's shape ", shape_str(input.shape()));
  for (const ext::Arg& a : {ext::Arg{"weight", weight}, ext::Arg{"bias", bias}}) {
    if (!a.tensor.defined()) continue;
    ext::check_same_dtype(kOp, {"input", input}, a);
    EMBER_CHECK(a.tensor.shape() == normalized_shape, ShapeError, kOp, ": '", a.name, "' must have the shape ",
                shape_str(normalized_shape), " of normalized_shape, it has ", shape_str(a.tensor.shape()));
  }
  EMBER_CHECK(eps >= 0, ValueError, kOp, ": eps must be non-negative, got ", eps);
  const auto width = static_cast<std::size_t>(numel_of(normalized_shape));
  return {static_cast<std::size_t>(input.numel()) / width, width};
}

template <class T>
const T* raw_or_null(const Tensor& t) {
  return t.defined() ? t.raw<T>() : nullptr;
}

// dγ and dβ: the column sums of dy·x̂ and dy over the rows, shaped as the normalized shape.
Tensor column_sums(const Tensor& values, const Rows& r, const Shape& normalized_shape) {
  return sum(values.reshape({static_cast<std::int64_t>(r.rows), static_cast<std::int64_t>(r.width)}),
             std::vector<int>{0})
      .reshape(normalized_shape);
}

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (const ext::AutocastInputs cast{OpKey::layer_norm, {&input, &weight, &bias}})
    return layer_norm(cast[0], normalized_shape, cast[1], cast[2], eps);
  const Rows r = check_layer_norm(input, normalized_shape, weight, bias, eps);
  if (is_half(input.dtype()))  // in f32, rounded once (Note [half precision]); the casts carry the gradients
    return layer_norm(ext::widened(input), normalized_shape, ext::widened(weight), ext::widened(bias), eps)
        .to(input.dtype());
  Tensor y = ext::new_empty(input, input.shape());
  Tensor mean = ext::new_empty(input, {static_cast<std::int64_t>(r.rows)});
  Tensor invstd = ext::new_empty(input, {static_cast<std::int64_t>(r.rows)});
  ext::dispatch(
      input,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::layer_norm_forward<T>(input.raw<T>(), raw_or_null<T>(weight), raw_or_null<T>(bias), y.raw<T>(),
                                            mean.raw<T>(), invstd.raw<T>(), r.rows, r.width, eps);
      },
      [&](auto stream) {
        kernels::cuda::layer_norm_forward(input.raw<float>(), raw_or_null<float>(weight), raw_or_null<float>(bias),
                                          y.raw<float>(), mean.raw<float>(), invstd.raw<float>(), r.rows, r.width, eps,
                                          stream);
      });
  if (autograd::needs_recording({&input, &weight, &bias})) {
    autograd::record(y, kOp, {&input, &weight, &bias},
                     [x = input.detach(), gamma = weight.defined() ? weight.detach() : Tensor(), mean, invstd, r,
                      normalized_shape](const Tensor& dy, NeedsGrad needs) {
                       Tensor dx = ext::new_empty(x, x.shape());
                       Tensor dy_xhat = needs[1] ? ext::new_empty(x, x.shape()) : Tensor();
                       ext::dispatch(
                           x,
                           [&](auto zero) {
                             using T = decltype(zero);
                             kernels::cpu::layer_norm_backward<T>(
                                 dy.raw<T>(), x.raw<T>(), raw_or_null<T>(gamma), mean.raw<T>(), invstd.raw<T>(),
                                 dx.raw<T>(), dy_xhat.defined() ? dy_xhat.raw<T>() : nullptr, r.rows, r.width);
                           },
                           [&](auto stream) {
                             kernels::cuda::layer_norm_backward(
                                 dy.raw<float>(), x.raw<float>(), raw_or_null<float>(gamma), mean.raw<float>(),
                                 invstd.raw<float>(), dx.raw<float>(),
                                 dy_xhat.defined() ? dy_xhat.raw<float>() : nullptr, r.rows, r.width, stream);
                           });
                       Gradients grads(3);
                       grads[0] = dx;
                       if (needs[1]) grads[1] = column_sums(dy_xhat, r, normalized_shape);
                       if (needs[2]) grads[2] = column_sums(dy, r, normalized_shape);
                       return grads;
                     });
  }
  return y;
}

}  // namespace ember
