// CUDA fused bias+ReLU kernels: the forward is elementwise; the backward gives each column to one
// thread (adjacent threads, adjacent columns: coalesced), which masks its gradient row by row and
// sums it in a fixed order, so the bias gradient is deterministic without atomics.
#include <cuda_runtime.h>

#include "kernels/bias_activation.h"
#include "kernels/cuda/grid.cuh"

namespace ember::kernels::cuda {
namespace {

__global__ void bias_relu_forward_kernel(float* y, const float* bias, std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const float v = y[i] + bias[i % cols];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void bias_forward_kernel(float* y, const float* bias, std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) y[i] += bias[i % cols];
}

__global__ void bias_relu_backward_kernel(const float* dy, const float* y, float* dx, float* dbias, std::size_t rows,
                                          std::size_t cols) {
  const std::size_t c = global_thread();
  if (c >= cols) return;
  float sum = 0.0f;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t i = r * cols + c;
    const float v = y[i] > 0.0f ? dy[i] : 0.0f;
    dx[i] = v;
    sum += v;
  }
  dbias[c] = sum;
}

}  // namespace

void bias_relu_forward(float* y, const float* bias, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  const std::size_t n = rows * cols;
  if (n == 0) return;
  bias_relu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(y, bias, rows, cols);
  check_launch("bias_relu_forward", stream);
}

void bias_forward(float* y, const float* bias, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  const std::size_t n = rows * cols;
  if (n == 0) return;
  bias_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(y, bias, rows, cols);
  check_launch("bias_forward", stream);
}

void bias_relu_backward(const float* dy, const float* y, float* dx, float* dbias, std::size_t rows, std::size_t cols,
                        cudaStream_t stream) {
  if (cols == 0) return;
  bias_relu_backward_kernel<<<static_cast<unsigned>(ceil_div(cols, kBlock)), kBlock, 0, stream>>>(dy, y, dx, dbias,
                                                                                                 rows, cols);
  check_launch("bias_relu_backward", stream);
}

}  // namespace ember::kernels::cuda
