// Batch norm's formulas, shared by the CPU and CUDA twins so that both compute the same thing in
// the same order (one truth per op). Each is templated on the type the statistics are kept in:
// the CPU keeps them in f64 for f32 and f64 tensors alike, CUDA in f32. Compiled as host code by
// g++ and as host and device code by nvcc.
#pragma once

#include <cstddef>

#include "kernels/common.h"
#include "kernels/elementwise_math.h"

namespace ember::kernels {

// 1/√(var + eps): the inverse standard deviation saved for backward.
template <class S>
EMBER_HOST_DEVICE S batch_norm_invstd(S var, S eps) {
  return S(1) / math::sqrt(var + eps);  // sqrtf for f32, sqrt for f64: pinned, not left to overloads
}

// Normalization and the affine step folded into one multiply-add per element:
// y = x·scale + shift, scale = γ·invstd, shift = β − mean·γ·invstd.
template <class S>
struct BatchNormAffine {
  S scale, shift;
};
template <class S>
EMBER_HOST_DEVICE BatchNormAffine<S> batch_norm_affine(S mean, S invstd, S gamma, S beta) {
  return {invstd * gamma, beta - mean * invstd * gamma};
}

// The running statistics move toward the batch's by `momentum`, the variance unbiased (m/(m−1))
// as PyTorch keeps it. The callers skip an empty batch (its statistics are NaN), leaving the
// running ones as they were.
template <class S>
EMBER_HOST_DEVICE S batch_norm_running(S running, S batch, S momentum) {
  return (S(1) - momentum) * running + momentum * batch;
}
template <class S>
EMBER_HOST_DEVICE S batch_norm_unbiased_var(S var, std::size_t m) {
  return m > 1 ? var * static_cast<S>(m) / static_cast<S>(m - 1) : var;
}

// dx from the channel's sums Σdy and Σdy·x̂ over its m values:
// dx = γ·invstd/m · (m·dy − Σdy − x̂·Σdy·x̂), x̂ = (x − mean)·invstd.
template <class S>
EMBER_HOST_DEVICE S batch_norm_input_grad(S dy, S x, S mean, S invstd, S gamma, S m, S sum_dy, S sum_dy_xhat) {
  const S xhat = (x - mean) * invstd;
  return gamma * invstd / m * (m * dy - sum_dy - xhat * sum_dy_xhat);
}

}  // namespace ember::kernels
