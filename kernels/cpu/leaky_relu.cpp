// CPU twin of the LeakyReLU kernels.
#include "kernels/leaky_relu.h"

namespace ember::kernels::cpu {

template <class T>
void leaky_relu_forward(const T* x, T* y, std::size_t n, T slope) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : slope * x[i];
}

template <class T>
void leaky_relu_backward(const T* dy, const T* x, T* dx, std::size_t n, T slope, WriteMode mode) {
  for (std::size_t i = 0; i < n; ++i) {
    const T g = x[i] > T(0) ? dy[i] : slope * dy[i];
    dx[i] = mode == WriteMode::overwrite ? g : dx[i] + g;
  }
}

template void leaky_relu_forward<float>(const float*, float*, std::size_t, float);
template void leaky_relu_forward<double>(const double*, double*, std::size_t, double);
template void leaky_relu_backward<float>(const float*, const float*, float*, std::size_t, float, WriteMode);
template void leaky_relu_backward<double>(const double*, const double*, double*, std::size_t, double, WriteMode);

}  // namespace ember::kernels::cpu
