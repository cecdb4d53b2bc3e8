// CUDA dropout: the same counter-based stream as the CPU twin, one element per thread step.
#include <cuda_runtime.h>

#include "kernels/cuda/grid.cuh"
#include "kernels/dropout.h"

namespace ember::kernels::cuda {
namespace {

__global__ void dropout_forward_kernel(const float* x, float* y, std::uint8_t* mask, std::size_t n, float p,
                                       float scale, std::uint64_t seed, std::uint64_t offset) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const bool keep = counter_uniform(seed, offset + i) >= p;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

__global__ void dropout_backward_kernel(const float* dy, const std::uint8_t* mask, float* dx, std::size_t n, float scale) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}

float keep_scale(float p) { return p < 1.0f ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f; }

}  // namespace

void dropout_forward(const float* x, float* y, std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed,
                     std::uint64_t offset, cudaStream_t stream) {
  if (n == 0) return;
  dropout_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, mask, n, p, keep_scale(p), seed, offset);
  check_launch("dropout_forward", stream);
}

void dropout_backward(const float* dy, const std::uint8_t* mask, float* dx, std::size_t n, float p, cudaStream_t stream) {
  if (n == 0) return;
  dropout_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dy, mask, dx, n, keep_scale(p));
  check_launch("dropout_backward", stream);
}

}  // namespace ember::kernels::cuda
