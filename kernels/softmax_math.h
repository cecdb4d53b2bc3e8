// The per-element formulas of softmax, log-softmax and softmax cross-entropy, shared by both
// backends (Note [one formula per op] in elementwise_math.h).
//
// Note [softmax from max and sum]
// Every formula here works from a row's maximum m and its sum s = Σ exp(x − m), never from the
// rounded log-sum-exp m + log s: for logits around 1e4 a float log-sum-exp is off by up to half
// an ulp of 1e4 (5e-4), and exp(x − lse) carries that error into every probability, while x − m
// is exact enough and s lies in [1, cols]. A row holding +∞, or only −∞, gives NaN, as in
// PyTorch. How m and s are found (a sequential double sum on the CPU, a warp's float tree on the
// GPU) is each backend's own; what is done with them is written once, here.
#pragma once

#include "kernels/common.h"
#include "kernels/elementwise_math.h"

namespace ember::kernels {

// exp(x − m): the numerator of the softmax.
template <class T>
EMBER_HOST_DEVICE T softmax_numerator(T x, T row_max) {
  return math::exp(x - row_max);
}

// softmax = exp(x − m) · (1/s)
template <class T>
EMBER_HOST_DEVICE T softmax_formula(T numerator, T inv_sum) {
  return numerator * inv_sum;
}

// log_softmax = (x − m) − log s
template <class T>
EMBER_HOST_DEVICE T log_softmax_formula(T x, T row_max, T log_sum) {
  return (x - row_max) - log_sum;
}

// −log softmax(x)[t] = (m − x_t) + log s
template <class T>
EMBER_HOST_DEVICE T cross_entropy_loss_formula(T x_target, T row_max, T log_sum) {
  return (row_max - x_target) + log_sum;
}

// d loss / d x = (softmax − onehot) · scale
template <class T>
EMBER_HOST_DEVICE T cross_entropy_grad_formula(T numerator, T inv_sum, bool is_target, T scale) {
  return (numerator * inv_sum - (is_target ? T(1) : T(0))) * scale;
}

// From the forward output y: softmax dx = y·(dy − Σ dy·y); log_softmax dx = dy − exp(y)·Σ dy.
template <class T>
EMBER_HOST_DEVICE T softmax_backward_formula(T dy, T y, T dot) {
  return y * (dy - dot);
}
template <class T>
EMBER_HOST_DEVICE T log_softmax_backward_formula(T dy, T y, T sum_dy) {
  return dy - math::exp(y) * sum_dy;
}

}  // namespace ember::kernels
