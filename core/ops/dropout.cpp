// Dropout: the mask from the counter-based stream of kernels/dropout.h, kept (1 byte per
// element) for the backward pass.
#include "kernels/dropout.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"

namespace ember {

Tensor dropout(const Tensor& input, double p, std::uint64_t seed, std::uint64_t offset) {
  ext::check_defined("dropout", {"input", input});
  ext::check_floating("dropout", {"input", input});
  EMBER_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: p must be in [0, 1], got ", p);
  // bf16 on the CPU and both 16-bit types on CUDA have kernels of their own (an activation's size,
  // at every step; the widened op's bits); f16 on the CPU runs on a widened copy.
  if (input.dtype() == DType::f16 && !input.is_cuda())
    return dropout(ext::widened(input), p, seed, offset).to(input.dtype());
  Tensor y = ext::new_empty(input, input.shape());
  Tensor mask = ext::new_empty(input, input.shape(), DType::u8);
  const std::size_t n = static_cast<std::size_t>(input.numel());
  const float pf = static_cast<float>(p);
  ext::dispatch_with_half(
      input,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::dropout_forward<T>(input.raw<T>(), y.raw<T>(), mask.raw<std::uint8_t>(), n, pf, seed, offset);
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        kernels::cuda::dropout_forward(input.raw<T>(), y.raw<T>(), mask.raw<std::uint8_t>(), n, pf, seed, offset,
                                       stream);
      });
  if (autograd::needs_recording({&input})) {
    autograd::record(y, "dropout", {&input}, [mask, pf](const Tensor& g, autograd::NeedsGrad) {
      Tensor dx = ext::new_empty(g, g.shape());
      const std::size_t n = static_cast<std::size_t>(g.numel());
      ext::dispatch_with_half(
          g,
          [&](auto zero) {
            using T = decltype(zero);
            kernels::cpu::dropout_backward<T>(g.raw<T>(), mask.raw<std::uint8_t>(), dx.raw<T>(), n, pf);
          },
          [&](auto zero, auto stream) {
            using T = decltype(zero);
            kernels::cuda::dropout_backward(g.raw<T>(), mask.raw<std::uint8_t>(), dx.raw<T>(), n, pf, stream);
          });
      return autograd::Gradients{dx};
    });
  }
  return y;
}

}  // namespace ember
