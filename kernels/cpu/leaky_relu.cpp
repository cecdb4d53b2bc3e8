// CPU twin of the LeakyReLU kernels.
#include "kernels/leaky_relu.h"

namespace ember::kernels::cpu {

// Written as two selects against zero, summed: GCC 12 leaves a loop scalar when a multiply sits in
// one arm of a select (it may trap under the default -ftrapping-math). The sum is exact, since one
// term is always zero; only a −0 input comes out as +0.
template <class T>
void leaky_relu_forward(const T* __restrict x, T* __restrict y, std::size_t n, T slope) {
  for (std::size_t i = 0; i < n; ++i) y[i] = (x[i] > T(0) ? x[i] : T(0)) + (x[i] > T(0) ? T(0) : x[i]) * slope;
}

template <class T>
void leaky_relu_backward(const T* __restrict dy, const T* __restrict x, T* __restrict dx, std::size_t n, T slope,
                         WriteMode mode) {
  if (mode == WriteMode::overwrite) {
    for (std::size_t i = 0; i < n; ++i) dx[i] = (x[i] > T(0) ? dy[i] : T(0)) + (x[i] > T(0) ? T(0) : dy[i]) * slope;
  } else {
    for (std::size_t i = 0; i < n; ++i) dx[i] += (x[i] > T(0) ? dy[i] : T(0)) + (x[i] > T(0) ? T(0) : dy[i]) * slope;
  }
}

template void leaky_relu_forward<float>(const float*, float*, std::size_t, float);
template void leaky_relu_forward<double>(const double*, double*, std::size_t, double);
template void leaky_relu_backward<float>(const float*, const float*, float*, std::size_t, float, WriteMode);
template void leaky_relu_backward<double>(const double*, const double*, double*, std::size_t, double, WriteMode);

}  // namespace ember::kernels::cpu
