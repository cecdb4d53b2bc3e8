// The GELU's formula and kernels, for both the C++ and the CUDA compiler: nothing here needs more of
// ember than <ember/kernels/common.h> (EMBER_HOST_DEVICE, cudaStream_t), so nvcc compiles the .cu
// file without ember's host API.
#pragma once

#include <ember/kernels/common.h>

#include <math.h>

#include <cstddef>

namespace example {

// The formula, written once for both kernels (EMBER_HOST_DEVICE: host and device code under nvcc):
// gelu(x) = ½x(1 + tanh(u)), u = √(2/π)(x + 0.044715x³), and its derivative.
EMBER_HOST_DEVICE float tanh_of(float u) { return ::tanhf(u); }
EMBER_HOST_DEVICE double tanh_of(double u) { return ::tanh(u); }
template <class T>
EMBER_HOST_DEVICE T gelu_value(T x) {
  const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + tanh_of(u));
}
template <class T>
EMBER_HOST_DEVICE T gelu_derivative(T x) {
  const T t = tanh_of(T(0.7978845608028654) * (x + T(0.044715) * x * x * x));
  const T du = T(0.7978845608028654) * (T(1) + T(3) * T(0.044715) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}

// The kernels: y = gelu(x) and dx = dy·gelu'(x) over n elements.
namespace cpu {
template <class T>
void gelu_forward(const T* x, T* y, std::size_t n);
template <class T>
void gelu_backward(const T* dy, const T* x, T* dx, std::size_t n);
}  // namespace cpu
namespace cuda {
void gelu_forward(const float* x, float* y, std::size_t n, cudaStream_t stream);
void gelu_backward(const float* dy, const float* x, float* dx, std::size_t n, cudaStream_t stream);
}  // namespace cuda

}  // namespace example
