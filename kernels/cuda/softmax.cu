// CUDA softmax, log-softmax and fused softmax cross-entropy: one warp per row for the row
// statistics, one thread per element for the gradient; the formulas are kernels/softmax_math.h's.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/device_error.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/softmax.h"

namespace ember::kernels::cuda {
namespace {

constexpr unsigned kWarpsPerBlock = kBlock / kWarp;

// A row's maximum and Σ exp(x − max), computed by a whole warp; every lane gets both.
struct RowStats {
  float max, sum;
};
__device__ RowStats warp_row_stats(const float* row, std::size_t cols, unsigned lane) {
  float max = -INFINITY;
  for (std::size_t c = lane; c < cols; c += kWarp) max = row[c] > max ? row[c] : max;
  max = warp_max(max);
  float sum = 0.0f;
  for (std::size_t c = lane; c < cols; c += kWarp) sum += softmax_numerator(row[c], max);
  return {max, warp_sum(sum)};
}

__global__ void softmax_forward_kernel(SoftmaxKind kind, const float* x, float* y, std::size_t rows, std::size_t cols) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // the whole warp: all its lanes share the row
  const float* xr = x + row * cols;
  float* yr = y + row * cols;
  const RowStats s = warp_row_stats(xr, cols, lane);
  const float inv = 1.0f / s.sum, log_sum = logf(s.sum);
  for (std::size_t c = lane; c < cols; c += kWarp)
    yr[c] = kind == SoftmaxKind::softmax ? softmax_formula(softmax_numerator(xr[c], s.max), inv)
                                         : log_softmax_formula(xr[c], s.max, log_sum);
}

__global__ void softmax_backward_kernel(SoftmaxKind kind, const float* dy, const float* y, float* dx, std::size_t rows,
                                        std::size_t cols, WriteMode mode) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* dyr = dy + row * cols;
  const float* yr = y + row * cols;
  float* dxr = dx + row * cols;
  float dot = 0.0f;
  for (std::size_t c = lane; c < cols; c += kWarp) dot += kind == SoftmaxKind::softmax ? dyr[c] * yr[c] : dyr[c];
  dot = warp_sum(dot);
  for (std::size_t c = lane; c < cols; c += kWarp) {
    const float g = kind == SoftmaxKind::softmax ? softmax_backward_formula(dyr[c], yr[c], dot)
                                                 : log_softmax_backward_formula(dyr[c], yr[c], dot);
    dxr[c] = mode == WriteMode::overwrite ? g : dxr[c] + g;
  }
}

__device__ void raise_target_error(DeviceErrorRecord* error, long long target, std::size_t row, std::size_t cols) {
  raise_device_error(error, DeviceErrorCode::target_out_of_range, OpTag::cross_entropy, static_cast<long long>(row),
                     target, static_cast<long long>(cols));
}

template <class Target>
__global__ void cross_entropy_forward_kernel(const float* logits, const Target* targets, float* loss, float* row_max,
                                             float* row_sum, std::size_t rows, std::size_t cols,
                                             DeviceErrorRecord* error) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* xr = logits + row * cols;
  const RowStats s = warp_row_stats(xr, cols, lane);
  if (lane != 0) return;
  row_max[row] = s.max;
  row_sum[row] = s.sum;
  const long long target = static_cast<long long>(targets[row]);
  if (target < 0 || target >= static_cast<long long>(cols)) {
    loss[row] = 0.0f;
    raise_target_error(error, target, row, cols);
    return;
  }
  loss[row] = cross_entropy_loss_formula(xr[target], s.max, logf(s.sum));
}

template <class Target>
__global__ void cross_entropy_backward_kernel(const float* logits, const Target* targets, const float* row_max,
                                              const float* row_sum, const float* grad_scale, float row_scale,
                                              float* dlogits, std::size_t rows, std::size_t cols, WriteMode mode) {
  const std::size_t n = rows * cols;
  const float scale = *grad_scale * row_scale;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const std::size_t r = i / cols, c = i % cols;
    const bool is_target = static_cast<long long>(c) == static_cast<long long>(targets[r]);
    const float g =
        cross_entropy_grad_formula(softmax_numerator(logits[i], row_max[r]), 1.0f / row_sum[r], is_target, scale);
    dlogits[i] = mode == WriteMode::overwrite ? g : dlogits[i] + g;
  }
}

// One warp per row writes the row's gradient and loss; the last block to arrive sums the losses.
// No thread returns early: every thread of every block must reach the __syncthreads below.
template <class Target>
__global__ void cross_entropy_fused_kernel(const float* logits, const Target* targets, float* dlogits, float* row_loss,
                                           float* batch_loss, float* loss_sum, std::size_t rows, std::size_t cols,
                                           float row_scale, DeviceErrorRecord* error, unsigned* blocks_done) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row < rows) {
    const float* xr = logits + row * cols;
    float* dr = dlogits + row * cols;
    const long long target = static_cast<long long>(targets[row]);
    const bool bad = target < 0 || target >= static_cast<long long>(cols);
    const RowStats s = warp_row_stats(xr, cols, lane);
    const float inv = 1.0f / s.sum;
    for (std::size_t c = lane; c < cols; c += kWarp)
      dr[c] = bad ? 0.0f
                  : cross_entropy_grad_formula(softmax_numerator(xr[c], s.max), inv,
                                               static_cast<long long>(c) == target, row_scale);
    if (lane == 0) {
      row_loss[row] = bad ? 0.0f : cross_entropy_loss_formula(xr[target], s.max, logf(s.sum));
      if (bad) raise_target_error(error, target, row, cols);
    }
  }
  if (!is_last_block(blocks_done)) return;
  // Fixed order: thread t sums rows t, t + blockDim, ...; then a fixed tree over the threads.
  __shared__ float partial[kBlock];
  const volatile float* losses = row_loss;  // written by other blocks: read past the L1 cache
  float sum = 0.0f;
  for (std::size_t r = threadIdx.x; r < rows; r += blockDim.x) sum += losses[r];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float total = partial[0];
    if (batch_loss) *batch_loss = total * row_scale;
    if (loss_sum) *loss_sum += total;
    if (!isfinite(total)) raise_device_error(error, DeviceErrorCode::non_finite, OpTag::loss_check, 0, 0, 0);
    *blocks_done = 0;  // ready for the next launch (or graph replay)
  }
}

// One warp per row.
LaunchShape warp_per_row(std::size_t rows) { return {dim3(static_cast<unsigned>(ceil_div(rows, kWarpsPerBlock)))}; }

}  // namespace

void softmax_forward(SoftmaxKind kind, const float* x, float* y, std::size_t rows, std::size_t cols,
                     cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  launch<softmax_forward_kernel>(warp_per_row(rows), stream, kind, x, y, rows, cols);
}

void softmax_backward(SoftmaxKind kind, const float* dy, const float* y, float* dx, std::size_t rows, std::size_t cols,
                      WriteMode mode, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  launch<softmax_backward_kernel>(warp_per_row(rows), stream, kind, dy, y, dx, rows, cols, mode);
}

template <class Target>
void cross_entropy_forward(const float* logits, const Target* targets, float* loss, float* row_max, float* row_sum,
                           std::size_t rows, std::size_t cols, DeviceErrorRecord* error, cudaStream_t stream) {
  if (rows == 0) return;
  launch<cross_entropy_forward_kernel<Target>>(warp_per_row(rows), stream, logits, targets, loss, row_max, row_sum,
                                               rows, cols, error);
}

template <class Target>
void cross_entropy_backward(const float* logits, const Target* targets, const float* row_max, const float* row_sum,
                            const float* grad_scale, float row_scale, float* dlogits, std::size_t rows,
                            std::size_t cols, WriteMode mode, cudaStream_t stream) {
  launch_n<cross_entropy_backward_kernel<Target>>(rows * cols, stream, logits, targets, row_max, row_sum, grad_scale,
                                                  row_scale, dlogits, rows, cols, mode);
}

template <class Target>
void cross_entropy_fused(const float* logits, const Target* targets, float* dlogits, float* row_loss, float* batch_loss,
                         float* loss_sum, std::size_t rows, std::size_t cols, float row_scale, DeviceErrorRecord* error,
                         unsigned* blocks_done, cudaStream_t stream) {
  // No rows still writes the batch loss (0·row_scale) and adds 0 to the sum, as the CPU twin does:
  // one block, which is the last.
  launch<cross_entropy_fused_kernel<Target>>(warp_per_row(rows > 0 ? rows : 1), stream, logits, targets, dlogits,
                                             row_loss, batch_loss, loss_sum, rows, cols, row_scale, error, blocks_done);
}

#define EMBER_INSTANTIATE(Target)                                                                                     \
  template void cross_entropy_forward<Target>(const float*, const Target*, float*, float*, float*, std::size_t,       \
                                              std::size_t, DeviceErrorRecord*, cudaStream_t);                         \
  template void cross_entropy_backward<Target>(const float*, const Target*, const float*, const float*, const float*, \
                                               float, float*, std::size_t, std::size_t, WriteMode, cudaStream_t);     \
  template void cross_entropy_fused<Target>(const float*, const Target*, float*, float*, float*, float*, std::size_t, \
                                            std::size_t, float, DeviceErrorRecord*, unsigned*, cudaStream_t);
EMBER_INSTANTIATE(std::int32_t)
EMBER_INSTANTIATE(std::int64_t)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cuda
