// CUDA LeakyReLU kernels: grid-stride loops, then their launchers.
#include <cuda_runtime.h>

#include "kernels/cuda/grid.cuh"
#include "kernels/leaky_relu.h"

namespace ember::kernels::cuda {
namespace {

__global__ void leaky_relu_forward_kernel(const float* x, float* y, std::size_t n, float slope) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
}

__global__ void leaky_relu_backward_kernel(const float* dy, const float* x, float* dx, std::size_t n, float slope,
                                           WriteMode mode) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const float g = x[i] > 0.0f ? dy[i] : slope * dy[i];
    dx[i] = mode == WriteMode::overwrite ? g : dx[i] + g;
  }
}

}  // namespace

void leaky_relu_forward(const float* x, float* y, std::size_t n, float slope, cudaStream_t stream) {
  if (n == 0) return;
  leaky_relu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n, slope);
  check_launch("leaky_relu_forward", stream);
}

void leaky_relu_backward(const float* dy, const float* x, float* dx, std::size_t n, float slope, WriteMode mode,
                         cudaStream_t stream) {
  if (n == 0) return;
  leaky_relu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dy, x, dx, n, slope, mode);
  check_launch("leaky_relu_backward", stream);
}

}  // namespace ember::kernels::cuda
