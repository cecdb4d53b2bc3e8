// The GELU op: argument checks, the dispatch to the CPU or CUDA kernel, the derivative rule; and
// the CPU kernels. Written with ember's extension API only (<ember/extension.h>).
#include "gelu.h"

namespace example {

namespace cpu {
template <class T>
void gelu_forward(const T* x, T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = gelu_value(x[i]);
}
template <class T>
void gelu_backward(const T* dy, const T* x, T* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_derivative(x[i]);
}
template void gelu_forward<float>(const float*, float*, std::size_t);
template void gelu_forward<double>(const double*, double*, std::size_t);
template void gelu_backward<float>(const float*, const float*, float*, std::size_t);
template void gelu_backward<double>(const double*, const double*, double*, std::size_t);
}  // namespace cpu

namespace {
// dx = dy·gelu'(x), on x's device.
ember::Tensor gelu_backward(const ember::Tensor& dy, const ember::Tensor& x) {
  using namespace ember;
  Tensor dx = ext::new_empty(x, x.shape());
  const std::size_t n = static_cast<std::size_t>(x.numel());
  ext::dispatch(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        cpu::gelu_backward<T>(dy.raw<T>(), x.raw<T>(), dx.raw<T>(), n);
      },
      [&](auto stream) { cuda::gelu_backward(dy.raw<float>(), x.raw<float>(), dx.raw<float>(), n, stream); });
  return dx;
}
}  // namespace

ember::Tensor gelu_tanh(const ember::Tensor& x) {
  using namespace ember;
  ext::check_defined("gelu_tanh", {"input", x});
  ext::check_floating("gelu_tanh", {"input", x});
  Tensor y = ext::new_empty(x, x.shape());
  const std::size_t n = static_cast<std::size_t>(x.numel());
  ext::dispatch(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        cpu::gelu_forward<T>(x.raw<T>(), y.raw<T>(), n);
      },
      [&](auto stream) { cuda::gelu_forward(x.raw<float>(), y.raw<float>(), n, stream); });
  if (autograd::needs_recording({&x})) {
    autograd::record(y, "gelu_tanh", {&x}, [x_saved = x.detach()](const Tensor& g, autograd::NeedsGrad) {
      return autograd::Gradients{gelu_backward(g, x_saved)};
    });
  }
  return y;
}

}  // namespace example
