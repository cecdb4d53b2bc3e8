// Softmax, log-softmax and the fused softmax cross-entropy; pixel normalization.
#include "core/autograd.h"
#include "core/kernel_errors.h"
#include "core/op_helpers.h"
#include "core/ops.h"
#include "kernels/common.h"
#include "kernels/elementwise.h"
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
  Tensor dx = detail::new_empty(y, y.shape());
  std::size_t rows = 0, cols = 0;
  rows_cols(y, rows, cols);
  if (y.is_cuda()) {
    EMBER_CUDA_ONLY(detail::CudaScope scope(y.device());
                    kernels::cuda::softmax_backward(kind, dy.raw<float>(), y.raw<float>(), dx.raw<float>(), rows, cols,
                                                    WriteMode::overwrite, scope.stream()));
  } else {
    detail::visit_floating(y.dtype(), [&](auto zero) {
      using T = decltype(zero);
      kernels::cpu::softmax_backward<T>(kind, dy.raw<T>(), y.raw<T>(), dx.raw<T>(), rows, cols, WriteMode::overwrite);
    });
  }
  return dx;
}

Tensor softmax_op(SoftmaxKind kind, const char* name, const Tensor& x, int dim) {
  detail::check_defined(name, {"input", x});
  detail::check_floating(name, {"input", x});
  EMBER_CHECK(x.dim() >= 1 && detail::normalize_dim(name, dim, x.dim()) == x.dim() - 1, ValueError, name,
              ": only the last dim is supported (dim=-1); move the dim last with transpose() or reshape()");
  Tensor y = detail::new_empty(x, x.shape());
  std::size_t rows = 0, cols = 0;
  rows_cols(x, rows, cols);
  if (x.is_cuda()) {
    EMBER_CUDA_ONLY(detail::CudaScope scope(x.device());
                    kernels::cuda::softmax_forward(kind, x.raw<float>(), y.raw<float>(), rows, cols, scope.stream()));
  } else {
    detail::visit_floating(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      kernels::cpu::softmax_forward<T>(kind, x.raw<T>(), y.raw<T>(), rows, cols);
    });
  }
  if (autograd::needs_recording({&x})) {
    autograd::record(y, name, {&x}, [kind, y_saved = y.detach()](const Tensor& g, NeedsGrad) {
      return Gradients{softmax_backward(kind, g, y_saved)};
    });
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int dim) { return softmax_op(SoftmaxKind::softmax, "softmax", x, dim); }
Tensor log_softmax(const Tensor& x, int dim) { return softmax_op(SoftmaxKind::log_softmax, "log_softmax", x, dim); }

Tensor cross_entropy(const Tensor& input, const Tensor& target) {
  const char* name = "cross_entropy";
  detail::check_defined(name, {"input", input});
  detail::check_defined(name, {"target", target});
  detail::check_same_device(name, {{"input", input}, {"target", target}});
  detail::check_floating(name, {"input", input});
  detail::check_dim(name, {"input", input}, 2);
  detail::check_dtype(name, {"target", target}, {DType::i64, DType::i32});
  const std::int64_t batch = input.shape()[0], classes = input.shape()[1];
  EMBER_CHECK(target.dim() == 1 && target.shape()[0] == batch, ShapeError, name, ": 'target' must have shape [", batch,
              "] (one class index per row of 'input', which has shape ", shape_str(input.shape()),
              "), but it has shape ", shape_str(target.shape()));
  EMBER_CHECK(classes > 0, ShapeError, name, ": 'input' has no classes (shape ", shape_str(input.shape()), ")");
  const std::size_t rows = static_cast<std::size_t>(batch), cols = static_cast<std::size_t>(classes);
  Tensor losses = detail::new_empty(input, {batch});
  Tensor lse = detail::new_empty(input, {batch});
  const bool wide = target.dtype() == DType::i64;
  if (input.is_cuda()) {
    EMBER_CUDA_ONLY(
        detail::CudaScope scope(input.device());
        kernels::DeviceErrorRecord* error = cuda::device_error_record(input.device());
        if (wide) kernels::cuda::cross_entropy_forward<std::int64_t>(input.raw<float>(), target.raw<std::int64_t>(),
                                                                     losses.raw<float>(), lse.raw<float>(), rows, cols,
                                                                     error, scope.stream());
        else kernels::cuda::cross_entropy_forward<std::int32_t>(input.raw<float>(), target.raw<std::int32_t>(),
                                                                losses.raw<float>(), lse.raw<float>(), rows, cols,
                                                                error, scope.stream()));
  } else {
    kernels::DeviceErrorRecord error;
    detail::visit_floating(input.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if (wide) kernels::cpu::cross_entropy_forward<T, std::int64_t>(input.raw<T>(), target.raw<std::int64_t>(),
                                                                     losses.raw<T>(), lse.raw<T>(), rows, cols, &error);
      else kernels::cpu::cross_entropy_forward<T, std::int32_t>(input.raw<T>(), target.raw<std::int32_t>(),
                                                                losses.raw<T>(), lse.raw<T>(), rows, cols, &error);
    });
    if (error.code != 0) throw_kernel_error(error, input.device());
  }
  Tensor loss;
  {
    NoGradGuard no_grad;
    loss = mean(losses);
  }
  if (autograd::needs_recording({&input})) {
    autograd::record(loss, name, {&input}, [x = input.detach(), t = target.detach(), lse](const Tensor& g, NeedsGrad) {
      Tensor dx = detail::new_empty(x, x.shape());
      const std::size_t rows = static_cast<std::size_t>(x.shape()[0]), cols = static_cast<std::size_t>(x.shape()[1]);
      const bool wide = t.dtype() == DType::i64;
      if (x.is_cuda()) {
        EMBER_CUDA_ONLY(
            detail::CudaScope scope(x.device());
            const float row_scale = rows ? 1.0f / static_cast<float>(rows) : 0.0f;
            if (wide) kernels::cuda::cross_entropy_backward<std::int64_t>(
                x.raw<float>(), t.raw<std::int64_t>(), lse.raw<float>(), g.raw<float>(), row_scale, dx.raw<float>(),
                rows, cols, WriteMode::overwrite, scope.stream());
            else kernels::cuda::cross_entropy_backward<std::int32_t>(
                x.raw<float>(), t.raw<std::int32_t>(), lse.raw<float>(), g.raw<float>(), row_scale, dx.raw<float>(),
                rows, cols, WriteMode::overwrite, scope.stream()));
      } else {
        detail::visit_floating(x.dtype(), [&](auto zero) {
          using T = decltype(zero);
          const T row_scale = rows ? T(1) / static_cast<T>(rows) : T(0);
          if (wide) kernels::cpu::cross_entropy_backward<T, std::int64_t>(x.raw<T>(), t.raw<std::int64_t>(),
                                                                          lse.raw<T>(), g.raw<T>(), row_scale,
                                                                          dx.raw<T>(), rows, cols, WriteMode::overwrite);
          else kernels::cpu::cross_entropy_backward<T, std::int32_t>(x.raw<T>(), t.raw<std::int32_t>(), lse.raw<T>(),
                                                                     g.raw<T>(), row_scale, dx.raw<T>(), rows, cols,
                                                                     WriteMode::overwrite);
        });
      }
      return Gradients{dx};
    });
  }
  return loss;
}

Tensor normalize_u8(const Tensor& input, float mean, float std) {
  detail::check_defined("normalize_u8", {"input", input});
  detail::check_dtype("normalize_u8", {"input", input}, {DType::u8});
  EMBER_CHECK(std > 0.0f, ValueError, "normalize_u8: std must be positive, got ", std);
  Tensor out = detail::new_empty(input, input.shape(), DType::f32);
  const std::size_t n = static_cast<std::size_t>(input.numel());
  if (input.is_cuda()) {
    EMBER_CUDA_ONLY(detail::CudaScope scope(input.device());
                    kernels::cuda::normalize_u8(input.raw<std::uint8_t>(), out.raw<float>(), n, mean, std,
                                                scope.stream()));
  } else {
    kernels::cpu::normalize_u8(input.raw<std::uint8_t>(), out.raw<float>(), n, mean, std);
  }
  return out;
}

}  // namespace ember
