// LeakyReLU, the worked example of a layer with its own kernels (docs/writing-a-layer.md):
// y = x for x > 0, slope·x otherwise; dx = dy for x > 0, slope·dy otherwise.
// Same conventions as elementwise.h: CPU synchronous (float and double), CUDA f32 enqueued on
// `stream`, n == 0 a no-op, the backward overwrites or accumulates as told.
#pragma once

#include "kernels/common.h"

namespace ember::kernels::cpu {
template <class T> void leaky_relu_forward(const T* x, T* y, std::size_t n, T slope);
template <class T>
void leaky_relu_backward(const T* dy, const T* x, T* dx, std::size_t n, T slope, WriteMode mode);
}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {
void leaky_relu_forward(const float* x, float* y, std::size_t n, float slope, cudaStream_t stream);
void leaky_relu_backward(const float* dy, const float* x, float* dx, std::size_t n, float slope, WriteMode mode,
                         cudaStream_t stream);
}  // namespace ember::kernels::cuda
