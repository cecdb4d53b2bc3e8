// The GELU's CUDA kernels and their launchers, through ember's launch helper (checked, named after
// the kernel, nothing launched for n = 0).
#include <ember/extension_cuda.cuh>

#include "gelu_kernels.h"

namespace example::cuda {
namespace {
using ember::kernels::cuda::global_thread;
using ember::kernels::cuda::grid_stride;

__global__ void gelu_forward_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) y[i] = gelu_value(x[i]);
}
__global__ void gelu_backward_kernel(const float* dy, const float* x, float* dx, std::size_t n) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) dx[i] = dy[i] * gelu_derivative(x[i]);
}
}  // namespace

void gelu_forward(const float* x, float* y, std::size_t n, cudaStream_t stream) {
  ember::kernels::cuda::launch_n<gelu_forward_kernel>(n, stream, x, y, n);
}
void gelu_backward(const float* dy, const float* x, float* dx, std::size_t n, cudaStream_t stream) {
  ember::kernels::cuda::launch_n<gelu_backward_kernel>(n, stream, dy, x, dx, n);
}

}  // namespace example::cuda
