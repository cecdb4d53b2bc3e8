// The LeakyReLU op: checks, dispatch to the CPU or CUDA kernel, and the derivative rule beside
// the forward — the same pattern as the built-in ops in core/.
#include "layers/leaky_relu.h"

#include "core/autograd.h"
#include "core/op_helpers.h"
#include "kernels/leaky_relu.h"

namespace ember::nn {
namespace {

// dx = dy where x > 0, slope·dy elsewhere.
Tensor leaky_relu_backward(const Tensor& dy, const Tensor& x, double slope) {
  Tensor dx = detail::new_empty(x, x.shape());
  const std::size_t n = static_cast<std::size_t>(x.numel());
  if (x.is_cuda()) {
    EMBER_CUDA_ONLY(detail::CudaScope scope(x.device());
                    kernels::cuda::leaky_relu_backward(dy.raw<float>(), x.raw<float>(), dx.raw<float>(), n,
                                                       static_cast<float>(slope), kernels::WriteMode::overwrite,
                                                       scope.stream()));
  } else {
    detail::visit_floating(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      kernels::cpu::leaky_relu_backward<T>(dy.raw<T>(), x.raw<T>(), dx.raw<T>(), n, static_cast<T>(slope),
                                           kernels::WriteMode::overwrite);
    });
  }
  return dx;
}

}  // namespace

Tensor leaky_relu(const Tensor& x, double slope) {
  detail::check_defined("leaky_relu", {"input", x});
  detail::check_floating("leaky_relu", {"input", x});
  Tensor y = detail::new_empty(x, x.shape());
  const std::size_t n = static_cast<std::size_t>(x.numel());
  if (x.is_cuda()) {
    EMBER_CUDA_ONLY(detail::CudaScope scope(x.device());
                    kernels::cuda::leaky_relu_forward(x.raw<float>(), y.raw<float>(), n, static_cast<float>(slope),
                                                      scope.stream()));
  } else {
    detail::visit_floating(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      kernels::cpu::leaky_relu_forward<T>(x.raw<T>(), y.raw<T>(), n, static_cast<T>(slope));
    });
  }
  if (autograd::needs_recording({&x})) {
    autograd::record(y, "leaky_relu", {&x}, [x_saved = x.detach(), slope](const Tensor& g, autograd::NeedsGrad) {
      return autograd::Gradients{leaky_relu_backward(g, x_saved, slope)};
    });
  }
  return y;
}

std::string LeakyReLU::extra_repr() const { return detail::concat("negative_slope=", slope_); }

}  // namespace ember::nn
