// CUDA dropout (float, bf16, f16): the same counter-based stream as the CPU twin, one element per
// thread step.
#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/dropout.h"
#include "kernels/elementwise_math.h"

namespace ember::kernels::cuda {
namespace {

// T is float, bfloat16 or float16; C = compute_t<T> (f32 for the 16-bit types), rounded once.
template <class T>
__global__ void dropout_forward_kernel(const T* x, T* y, std::uint8_t* mask, std::size_t n, float p, compute_t<T> scale,
                                       std::uint64_t seed, std::uint64_t offset) {
  using C = compute_t<T>;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const bool keep = dropout_keeps(seed, offset + i, p);
    mask[i] = keep;
    y[i] = T(dropout_apply(keep, static_cast<C>(x[i]), scale));
  }
}

template <class T>
__global__ void dropout_backward_kernel(const T* dy, const std::uint8_t* mask, T* dx, std::size_t n,
                                        compute_t<T> scale) {
  using C = compute_t<T>;
  for (std::size_t i = global_thread(); i < n; i += grid_stride())
    dx[i] = T(dropout_apply(mask[i] != 0, static_cast<C>(dy[i]), scale));
}

}  // namespace

template <class T>
void dropout_forward(const T* x, T* y, std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed,
                     std::uint64_t offset, cudaStream_t stream) {
  launch_n<dropout_forward_kernel<T>>(n, stream, x, y, mask, n, p, dropout_scale<compute_t<T>>(p), seed, offset);
}

template <class T>
void dropout_backward(const T* dy, const std::uint8_t* mask, T* dx, std::size_t n, float p, cudaStream_t stream) {
  launch_n<dropout_backward_kernel<T>>(n, stream, dy, mask, dx, n, dropout_scale<compute_t<T>>(p));
}

#define EMBER_INSTANTIATE_FOR_TYPE(T)                                                                             \
  template void dropout_forward<T>(const T*, T*, std::uint8_t*, std::size_t, float, std::uint64_t, std::uint64_t, \
                                   cudaStream_t);                                                                 \
  template void dropout_backward<T>(const T*, const std::uint8_t*, T*, std::size_t, float, cudaStream_t);
EMBER_INSTANTIATE_FOR_TYPE(float)
EMBER_INSTANTIATE_FOR_TYPE(bfloat16)
EMBER_INSTANTIATE_FOR_TYPE(float16)
#undef EMBER_INSTANTIATE_FOR_TYPE

}  // namespace ember::kernels::cuda
