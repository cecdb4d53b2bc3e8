// CPU twin of dropout.
#include "kernels/dropout.h"

namespace ember::kernels::cpu {

template <class T>
void dropout_forward(const T* x, T* y, std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed,
                     std::uint64_t offset) {
  const T scale = p < 1.0f ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  for (std::size_t i = 0; i < n; ++i) {
    const bool keep = counter_uniform(seed, offset + i) >= p;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : T(0);
  }
}

template <class T>
void dropout_backward(const T* dy, const std::uint8_t* mask, T* dx, std::size_t n, float p) {
  const T scale = p < 1.0f ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  for (std::size_t i = 0; i < n; ++i) dx[i] = mask[i] ? dy[i] * scale : T(0);
}

template void dropout_forward<float>(const float*, float*, std::uint8_t*, std::size_t, float, std::uint64_t, std::uint64_t);
template void dropout_forward<double>(const double*, double*, std::uint8_t*, std::size_t, float, std::uint64_t,
                                      std::uint64_t);
template void dropout_backward<float>(const float*, const std::uint8_t*, float*, std::size_t, float);
template void dropout_backward<double>(const double*, const std::uint8_t*, double*, std::size_t, float);

}  // namespace ember::kernels::cpu
