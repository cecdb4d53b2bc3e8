// CUDA fused bias+ReLU kernels: the forward is elementwise; the backward gives each column to one
// thread (adjacent threads, adjacent columns: coalesced), which masks its gradient row by row and
// sums it in a fixed order, so the bias gradient is deterministic without atomics.
#include <cuda_runtime.h>

#include "kernels/bias_activation.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise_math.h"

namespace ember::kernels::cuda {
namespace {

__global__ void bias_relu_forward_kernel(float* y, const float* bias, std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    y[i] = unary_formula<UnaryOp::relu>(y[i] + bias[i % cols], {});
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
    const float v = activation_grad_formula<ActivationGrad::relu>(dy[i], y[i], {});
    dx[i] = v;
    sum += v;
  }
  dbias[c] = sum;
}

}  // namespace

void bias_relu_forward(float* y, const float* bias, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  launch_n<bias_relu_forward_kernel>(rows * cols, stream, y, bias, rows, cols);
}

void bias_forward(float* y, const float* bias, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  launch_n<bias_forward_kernel>(rows * cols, stream, y, bias, rows, cols);
}

void bias_relu_backward(const float* dy, const float* y, float* dx, float* dbias, std::size_t rows, std::size_t cols,
                        cudaStream_t stream) {
  if (cols == 0) return;
  launch<bias_relu_backward_kernel>({dim3(static_cast<unsigned>(ceil_div(cols, kBlock)))}, stream, dy, y, dx, dbias,
                                    rows, cols);
}

}  // namespace ember::kernels::cuda
