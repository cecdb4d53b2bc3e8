// Softmax, log-softmax and the fused softmax cross-entropy; the data pipeline's pixel normalization
// and batch gather.
#include "core/cuda/kernel_errors.h"
#include "core/ops/autocast.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/common.h"
#include "kernels/elementwise.h"
#include "kernels/gather.h"
#include "kernels/softmax.h"

namespace ember {
namespace {

using autograd::Gradients;
using autograd::NeedsGrad;
using kernels::SoftmaxKind;
using kernels::WriteMode;

void rows_cols(const Tensor& x, std::size_t& rows, std::size_t& cols) {
  cols = x.dim() == 0 ? 1 : static_cast<std::size_t>(x.shape().back());
  rows = cols == 0 ? 0 : static_cast<std::size_t>(x.numel()) / cols;
}

Tensor softmax_backward(SoftmaxKind kind, const Tensor& dy, const Tensor& y) {
  Tensor dx = ext::new_empty(y, y.shape());
  std::size_t rows = 0, cols = 0;
  rows_cols(y, rows, cols);
  ext::dispatch(
      y,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::softmax_backward<T>(kind, dy.raw<T>(), y.raw<T>(), dx.raw<T>(), rows, cols, WriteMode::overwrite);
      },
      [&](auto stream) {
        kernels::cuda::softmax_backward(kind, dy.raw<float>(), y.raw<float>(), dx.raw<float>(), rows, cols,
                                        WriteMode::overwrite, stream);
      });
  return dx;
}

Tensor softmax_op(SoftmaxKind kind, const char* name, const Tensor& x, int dim) {
  ext::check_defined(name, {"input", x});
  ext::check_floating(name, {"input", x});
  EMBER_CHECK(x.dim() >= 1 && ext::normalize_dim(name, dim, x.dim()) == x.dim() - 1, ValueError, name,
              ": only the last dim is supported (dim=-1); move the dim last with transpose() or reshape()");
  if (is_half(x.dtype())) return softmax_op(kind, name, ext::widened(x), dim).to(x.dtype());
  Tensor y = ext::new_empty(x, x.shape());
  std::size_t rows = 0, cols = 0;
  rows_cols(x, rows, cols);
  ext::dispatch(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::softmax_forward<T>(kind, x.raw<T>(), y.raw<T>(), rows, cols);
      },
      [&](auto stream) { kernels::cuda::softmax_forward(kind, x.raw<float>(), y.raw<float>(), rows, cols, stream); });
  if (autograd::needs_recording({&x})) {
    autograd::record(y, name, {&x}, [kind, y_saved = y.detach()](const Tensor& g, NeedsGrad) {
      return Gradients{softmax_backward(kind, g, y_saved)};
    });
  }
  return y;
}

// Another dim than the last: moved last by a permuted copy, and back.
Tensor softmax_along(SoftmaxKind kind, const char* name, const Tensor& x, int dim) {
  ext::check_defined(name, {"input", x});
  const int d = x.dim() == 0 ? 0 : ext::normalize_dim(name, dim, x.dim());
  if (x.dim() == 0 || d == x.dim() - 1) return softmax_op(kind, name, x, -1);
  std::vector<int> order(static_cast<std::size_t>(x.dim()));
  for (int i = 0; i < x.dim(); ++i) order[static_cast<std::size_t>(i)] = i;
  std::swap(order[static_cast<std::size_t>(d)], order.back());  // a swap is its own inverse
  return permute(softmax_op(kind, name, permute(x, order), -1), order);
}

}  // namespace

Tensor softmax(const Tensor& x, int dim) {
  if (const ext::AutocastInputs cast{OpKey::softmax, {&x}}) return softmax(cast[0], dim);
  return softmax_along(SoftmaxKind::softmax, "softmax", x, dim);
}
Tensor log_softmax(const Tensor& x, int dim) {
  if (const ext::AutocastInputs cast{OpKey::log_softmax, {&x}}) return log_softmax(cast[0], dim);
  return softmax_along(SoftmaxKind::log_softmax, "log_softmax", x, dim);
}

Tensor cross_entropy(const Tensor& input, const Tensor& target) {
  if (const ext::AutocastInputs cast{OpKey::cross_entropy, {&input, &target}}) return cross_entropy(cast[0], cast[1]);
  const char* name = "cross_entropy";
  ext::check_defined(name, {"input", input});
  ext::check_defined(name, {"target", target});
  ext::check_same_device(name, {{"input", input}, {"target", target}});
  ext::check_floating(name, {"input", input});
  ext::check_dim(name, {"input", input}, 2);
  ext::check_dtype(name, {"target", target}, {DType::i64, DType::i32});
  const std::int64_t batch = input.shape()[0], classes = input.shape()[1];
  EMBER_CHECK(target.dim() == 1 && target.shape()[0] == batch, ShapeError, name, ": 'target' must have shape [", batch,
              "] (one class index per row of 'input', which has shape ", shape_str(input.shape()),
              "), but it has shape ", shape_str(target.shape()));
  EMBER_CHECK(classes > 0, ShapeError, name, ": 'input' has no classes (shape ", shape_str(input.shape()), ")");
  if (is_half(input.dtype())) return cross_entropy(ext::widened(input), target).to(input.dtype());
  const std::size_t rows = static_cast<std::size_t>(batch), cols = static_cast<std::size_t>(classes);
  Tensor losses = ext::new_empty(input, {batch});
  // Each row's maximum and Σ exp(x − max), for the backward pass (Note [softmax from max and sum]).
  Tensor row_max = ext::new_empty(input, {batch}), row_sum = ext::new_empty(input, {batch});
  kernels::DeviceErrorRecord error;
  ext::dispatch(
      input,
      [&](auto zero) {
        using T = decltype(zero);
        ext::visit_index(target, [&](auto index) {
          using I = decltype(index);
          kernels::cpu::cross_entropy_forward<T, I>(input.raw<T>(), target.raw<I>(), losses.raw<T>(), row_max.raw<T>(),
                                                    row_sum.raw<T>(), rows, cols, &error);
        });
      },
      [&](auto stream) {
        ext::visit_index(target, [&](auto index) {
          using I = decltype(index);
          kernels::cuda::cross_entropy_forward<I>(input.raw<float>(), target.raw<I>(), losses.raw<float>(),
                                                  row_max.raw<float>(), row_sum.raw<float>(), rows, cols,
                                                  cuda::device_error_record(input.device()), stream);
        });
      });
  // On the CPU a bad target is known now; on CUDA the device-side record is read at the next
  // synchronization (Note [graph-safe kernels] in core/cuda/graph.h).
  if (error.code != 0) throw_kernel_error(error, input.device());
  Tensor loss;
  {
    NoGradGuard no_grad;
    loss = mean(losses);
  }
  if (autograd::needs_recording({&input})) {
    autograd::record(
        loss, name, {&input}, [x = input.detach(), t = target.detach(), row_max, row_sum](const Tensor& g, NeedsGrad) {
          Tensor dx = ext::new_empty(x, x.shape());
          const std::size_t rows = static_cast<std::size_t>(x.shape()[0]),
                            cols = static_cast<std::size_t>(x.shape()[1]);
          ext::dispatch(
              x,
              [&](auto zero) {
                using T = decltype(zero);
                const T row_scale = rows ? T(1) / static_cast<T>(rows) : T(0);
                ext::visit_index(t, [&](auto index) {
                  using I = decltype(index);
                  kernels::cpu::cross_entropy_backward<T, I>(x.raw<T>(), t.raw<I>(), row_max.raw<T>(), row_sum.raw<T>(),
                                                             g.raw<T>(), row_scale, dx.raw<T>(), rows, cols,
                                                             WriteMode::overwrite);
                });
              },
              [&](auto stream) {
                const float row_scale = rows ? 1.0f / static_cast<float>(rows) : 0.0f;
                ext::visit_index(t, [&](auto index) {
                  using I = decltype(index);
                  kernels::cuda::cross_entropy_backward<I>(x.raw<float>(), t.raw<I>(), row_max.raw<float>(),
                                                           row_sum.raw<float>(), g.raw<float>(), row_scale,
                                                           dx.raw<float>(), rows, cols, WriteMode::overwrite, stream);
                });
              });
          return Gradients{dx};
        });
  }
  return loss;
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, double label_smoothing) {
  EMBER_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError,
              "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  // PyTorch's cross_entropy is one op on autocast's f32 lists, label smoothing included: the
  // smoothing term is computed in f32 too (not log_softmax in the input's 16-bit dtype).
  if (const ext::AutocastInputs cast{OpKey::cross_entropy, {&input, &target}})
    return cross_entropy(cast[0], cast[1], label_smoothing);
  const Tensor hard = cross_entropy(input, target);
  if (label_smoothing == 0.0) return hard;
  const Tensor uniform = neg(mean(log_softmax(input, -1)));
  return add(mul(hard, 1.0 - label_smoothing), mul(uniform, label_smoothing));
}

Tensor normalize_u8(const Tensor& input, float mean, float std) {
  ext::check_defined("normalize_u8", {"input", input});
  Tensor out = ext::new_empty(input, input.shape(), DType::f32);
  normalize_u8(input, out, mean, std);
  return out;
}

void normalize_u8(const Tensor& input, const Tensor& out, float mean, float std) {
  ext::check_defined("normalize_u8", {"input", input});
  ext::check_dtype("normalize_u8", {"input", input}, {DType::u8});
  ext::check_dtype("normalize_u8", {"out", out}, {DType::f32});
  ext::check_same_device("normalize_u8", {{"input", input}, {"out", out}});
  EMBER_CHECK(std > 0.0f, ValueError, "normalize_u8: std must be positive, got ", std);
  EMBER_CHECK(out.numel() == input.numel(), ShapeError, "normalize_u8: 'out' has ", out.numel(),
              " elements but 'input' has ", input.numel());
  const std::size_t n = static_cast<std::size_t>(input.numel());
  ext::dispatch_device(
      input, [&] { kernels::cpu::normalize_u8(input.raw<std::uint8_t>(), out.raw<float>(), n, mean, std); },
      [&](auto stream) {
        kernels::cuda::normalize_u8(input.raw<std::uint8_t>(), out.raw<float>(), n, mean, std, stream);
      });
}

void gather_batch(const Tensor& images, const Tensor& labels, const Tensor& index, Tensor& x, Tensor& y, float mean,
                  float std) {
  const char* op = "gather_batch";
  ext::check_same_device(op, {{"images", images}, {"labels", labels}, {"index", index}, {"x", x}, {"y", y}});
  ext::check_dtype(op, {"images", images}, {DType::u8});
  ext::check_dtype(op, {"labels", labels}, {DType::i32});
  ext::check_dtype(op, {"index", index}, {DType::i32});
  ext::check_dtype(op, {"x", x}, {DType::f32});
  ext::check_dtype(op, {"y", y}, {DType::i32});
  const auto rows = static_cast<std::size_t>(index.numel());
  const auto cols = images.size(0) ? static_cast<std::size_t>(images.numel() / images.size(0)) : 0;
  EMBER_CHECK(x.numel() == static_cast<std::int64_t>(rows * cols) && y.numel() == static_cast<std::int64_t>(rows),
              ShapeError, op, ": 'x' must hold ", rows, " rows of ", cols, " values and 'y' ", rows, " labels");
  ext::dispatch_device(
      x,
      [&] {
        kernels::cpu::gather_batch(images.raw<std::uint8_t>(), labels.raw<std::int32_t>(), index.raw<std::int32_t>(),
                                   x.raw<float>(), y.raw<std::int32_t>(), rows, cols, mean, std);
      },
      [&](auto stream) {
        kernels::cuda::gather_batch(images.raw<std::uint8_t>(), labels.raw<std::int32_t>(), index.raw<std::int32_t>(),
                                    x.raw<float>(), y.raw<std::int32_t>(), rows, cols, mean, std, stream);
      });
}

}  // namespace ember
