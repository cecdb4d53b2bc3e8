// CUDA fused bias+ReLU kernels: the forward is elementwise; the backward masks the gradient on its
// way into the column sums of kernels/cuda/column_sum.cuh (parallel over rows and columns, in a
// fixed order), so the bias gradient is deterministic without atomics.
#include <cuda_runtime.h>

#include "kernels/bias_activation.h"
#include "kernels/cuda/column_sum.cuh"
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

}  // namespace

void bias_relu_forward(float* y, const float* bias, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  launch_n<bias_relu_forward_kernel>(rows * cols, stream, y, bias, rows, cols);
}

void bias_forward(float* y, const float* bias, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  launch_n<bias_forward_kernel>(rows * cols, stream, y, bias, rows, cols);
}

template <class T>
void bias_relu_backward(const T* dy, const T* y, T* dx, T* dbias, std::size_t rows, std::size_t cols, float* workspace,
                        cudaStream_t stream) {
  column_sum<ColumnSource::relu_grad>(dy, y, dx, dbias, 1, rows, cols, 1.0f, workspace, stream);
}

template void bias_relu_backward<float>(const float*, const float*, float*, float*, std::size_t, std::size_t, float*,
                                        cudaStream_t);
template void bias_relu_backward<bfloat16>(const bfloat16*, const bfloat16*, bfloat16*, bfloat16*, std::size_t,
                                           std::size_t, float*, cudaStream_t);
template void bias_relu_backward<float16>(const float16*, const float16*, float16*, float16*, std::size_t, std::size_t,
                                          float*, cudaStream_t);

}  // namespace ember::kernels::cuda
