// CUDA layer normalization (kernels/layer_norm.h): one warp per row, its sums warp reductions in
// f32; the formulas are kernels/layer_norm.h's and kernels/batch_norm_math.h's.
#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/layer_norm.h"

namespace ember::kernels::cuda {
namespace {

constexpr unsigned kRowsPerBlock = kBlock / kWarp;

__global__ void layer_norm_forward_kernel(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                          float* invstd, std::size_t rows, std::size_t width, float eps) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // the whole warp: all its lanes share the row
  const float* xr = x + row * width;
  float sum = 0.0f;
  for (std::size_t e = lane; e < width; e += kWarp) sum += xr[e];
  const float row_mean = warp_sum(sum) / static_cast<float>(width);
  float squares = 0.0f;
  for (std::size_t e = lane; e < width; e += kWarp) squares += (xr[e] - row_mean) * (xr[e] - row_mean);
  const float row_invstd = batch_norm_invstd<float>(warp_sum(squares) / static_cast<float>(width), eps);
  for (std::size_t e = lane; e < width; e += kWarp)
    y[row * width + e] =
        layer_norm_output<float>(xr[e], row_mean, row_invstd, gamma ? gamma[e] : 1.0f, beta ? beta[e] : 0.0f);
  if (lane == 0) {
    mean[row] = row_mean;
    invstd[row] = row_invstd;
  }
}

__global__ void layer_norm_backward_kernel(const float* dy, const float* x, const float* gamma, const float* mean,
                                           const float* invstd, float* dx, float* dy_xhat, std::size_t rows,
                                           std::size_t width) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float *dyr = dy + row * width, *xr = x + row * width;
  const float row_mean = mean[row], row_invstd = invstd[row], m = static_cast<float>(width);
  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for (std::size_t e = lane; e < width; e += kWarp) {
    const float g = dyr[e] * (gamma ? gamma[e] : 1.0f);
    sum_g += g;
    sum_g_xhat += g * (xr[e] - row_mean) * row_invstd;
  }
  sum_g = warp_sum(sum_g);
  sum_g_xhat = warp_sum(sum_g_xhat);
  for (std::size_t e = lane; e < width; e += kWarp) {
    const float g = dyr[e] * (gamma ? gamma[e] : 1.0f);
    dx[row * width + e] = batch_norm_input_grad<float>(g, xr[e], row_mean, row_invstd, 1.0f, m, sum_g, sum_g_xhat);
    if (dy_xhat) dy_xhat[row * width + e] = dyr[e] * (xr[e] - row_mean) * row_invstd;
  }
}

LaunchShape warp_per_row(std::size_t rows) { return {dim3(static_cast<unsigned>(ceil_div(rows, kRowsPerBlock)))}; }

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* invstd,
                        std::size_t rows, std::size_t width, double eps, cudaStream_t stream) {
  if (rows == 0) return;
  launch<layer_norm_forward_kernel>(warp_per_row(rows), stream, x, gamma, beta, y, mean, invstd, rows, width,
                                    static_cast<float>(eps));
}

void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* invstd,
                         float* dx, float* dy_xhat, std::size_t rows, std::size_t width, cudaStream_t stream) {
  if (rows == 0) return;
  launch<layer_norm_backward_kernel>(warp_per_row(rows), stream, dy, x, gamma, mean, invstd, dx, dy_xhat, rows, width);
}

}  // namespace ember::kernels::cuda
