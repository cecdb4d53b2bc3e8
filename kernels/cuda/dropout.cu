// CUDA dropout: the same counter-based stream as the CPU twin, one element per thread step.
#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/dropout.h"

namespace ember::kernels::cuda {
namespace {

__global__ void dropout_forward_kernel(const float* x, float* y, std::uint8_t* mask, std::size_t n, float p,
                                       float scale, std::uint64_t seed, std::uint64_t offset) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const bool keep = dropout_keeps(seed, offset + i, p);
    mask[i] = keep;
    y[i] = dropout_apply(keep, x[i], scale);
  }
}

__global__ void dropout_backward_kernel(const float* dy, const std::uint8_t* mask, float* dx, std::size_t n,
                                        float scale) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) dx[i] = dropout_apply(mask[i] != 0, dy[i], scale);
}

}  // namespace

void dropout_forward(const float* x, float* y, std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed,
                     std::uint64_t offset, cudaStream_t stream) {
  launch_n<dropout_forward_kernel>(n, stream, x, y, mask, n, p, dropout_scale<float>(p), seed, offset);
}

void dropout_backward(const float* dy, const std::uint8_t* mask, float* dx, std::size_t n, float p,
                      cudaStream_t stream) {
  launch_n<dropout_backward_kernel>(n, stream, dy, mask, dx, n, dropout_scale<float>(p));
}

}  // namespace ember::kernels::cuda
