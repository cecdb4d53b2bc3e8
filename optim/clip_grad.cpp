// Gradient clipping.
#include "optim/clip_grad.h"

#include <cmath>

#include "base/error.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"

namespace ember::optim {

double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm) {
  EMBER_CHECK(max_norm > 0 && std::isfinite(max_norm), ValueError, "clip_grad_norm: max_norm must be positive, got ",
              max_norm);
  const NoGradGuard no_grad;
  Tensor squares;  // Σ g², summed on the gradients' device in f32, as PyTorch's norms are
  for (const Tensor& p : parameters) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const Tensor wide = g.dtype() == DType::f32 ? g : g.to(DType::f32);
    const Tensor part = sum(mul(wide, wide));
    squares = squares.defined() ? add(squares, part) : part;
  }
  if (!squares.defined()) return 0.0;
  const double norm = std::sqrt(squares.item<double>());
  const double coefficient = max_norm / (norm + 1e-6);
  if (!std::isfinite(norm) || coefficient >= 1.0) return norm;  // PyTorch clamps the coefficient at 1
  for (const Tensor& p : parameters) {
    Tensor g = p.grad();
    if (g.defined()) mul_(g, coefficient);
  }
  return norm;
}

}  // namespace ember::optim
