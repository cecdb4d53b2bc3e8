// Layer normalization over each row's last `width` values (F.layer_norm, the normalized shape's
// elements flattened into one row of a [rows, width] view):
//   y = (x − mean)·invstd·γ + β,  invstd = 1/√(var + eps),
// with the row's mean and biased variance, two passes over the row (the mean, then Σ(x − mean)²).
// γ and β may be null (no elementwise affine). mean and invstd are saved per row for the backward,
// which writes, with g = dy·γ and x̂ = (x − mean)·invstd,
//   dx = invstd/m · (m·g − Σg − x̂·Σg·x̂)        (batch_norm_input_grad with γ = 1)
// and, where dy_xhat is not null, dy·x̂ per element: its column sums are dγ, as dy's are dβ (the
// op sums them with the sum op, in its fixed order).
// The sums over a row are taken in f64 on the CPU (as batch norm's, kernels/batch_norm_math.h,
// whose formulas these share; each element's terms in the element type: Note [layer norm's sums])
// and in f32 on CUDA, where a warp takes a row.
#pragma once

#include "kernels/batch_norm_math.h"
#include "kernels/common.h"

namespace ember::kernels {

// One element of the output, the statistics in S.
template <class S>
EMBER_HOST_DEVICE S layer_norm_output(S x, S mean, S invstd, S gamma, S beta) {
  return (x - mean) * invstd * gamma + beta;
}

}  // namespace ember::kernels

namespace ember::kernels::cpu {

template <class T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* invstd, std::size_t rows,
                        std::size_t width, double eps);
template <class T>
void layer_norm_backward(const T* dy, const T* x, const T* gamma, const T* mean, const T* invstd, T* dx, T* dy_xhat,
                         std::size_t rows, std::size_t width);

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* invstd,
                        std::size_t rows, std::size_t width, double eps, cudaStream_t stream);
void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* invstd,
                         float* dx, float* dy_xhat, std::size_t rows, std::size_t width, cudaStream_t stream);

}  // namespace ember::kernels::cuda
