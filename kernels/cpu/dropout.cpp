// CPU twin of dropout.
#include "kernels/dropout.h"

namespace ember::kernels::cpu {

template <class T>
void dropout_backward(const T* dy, const std::uint8_t* mask, T* dx, std::size_t n, float p) {
  const T scale = dropout_scale<T>(p);
  for (std::size_t i = 0; i < n; ++i) dx[i] = dropout_apply(mask[i] != 0, dy[i], scale);
}

template <class T>
void dropout_forward(const T* x, T* y, std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed,
                     std::uint64_t offset) {
  // The mask first, then the values from it: one loop doing both branches on each random keep
  // (a misprediction in four at p = 0.25); apart, the second loop is branch-free and vectorizes.
  for (std::size_t i = 0; i < n; ++i) mask[i] = dropout_keeps(seed, offset + i, p);
  dropout_backward(x, mask, y, n, p);
}

template void dropout_forward<float>(const float*, float*, std::uint8_t*, std::size_t, float, std::uint64_t,
                                     std::uint64_t);
template void dropout_forward<double>(const double*, double*, std::uint8_t*, std::size_t, float, std::uint64_t,
                                      std::uint64_t);
template void dropout_backward<float>(const float*, const std::uint8_t*, float*, std::size_t, float);
template void dropout_backward<double>(const double*, const std::uint8_t*, double*, std::size_t, float);

}  // namespace ember::kernels::cpu
