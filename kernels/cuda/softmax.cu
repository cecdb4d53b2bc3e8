// CUDA softmax, log-softmax and fused softmax cross-entropy: one warp per row for the row
// statistics, one thread per element for the gradient.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/grid.cuh"
#include "kernels/softmax.h"

namespace ember::kernels::cuda {
namespace {

constexpr unsigned kWarpsPerBlock = kBlock / kWarp;

// The stable log-sum-exp of one row, computed by a whole warp; every lane gets the result.
__device__ float warp_row_logsumexp(const float* row, std::size_t cols, unsigned lane) {
  float max = -INFINITY;
  for (std::size_t c = lane; c < cols; c += kWarp) max = fmaxf(max, row[c]);
  max = warp_max(max);
  if (isinf(max)) return max;
  float sum = 0.0f;
  for (std::size_t c = lane; c < cols; c += kWarp) sum += expf(row[c] - max);
  return max + logf(warp_sum(sum));
}

__global__ void softmax_forward_kernel(SoftmaxKind kind, const float* x, float* y, std::size_t rows,
                                       std::size_t cols) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* xr = x + row * cols;
  float* yr = y + row * cols;
  const float lse = warp_row_logsumexp(xr, cols, lane);
  for (std::size_t c = lane; c < cols; c += kWarp) {
    const float shifted = xr[c] - lse;
    yr[c] = kind == SoftmaxKind::softmax ? expf(shifted) : shifted;
  }
}

__global__ void softmax_backward_kernel(SoftmaxKind kind, const float* dy, const float* y, float* dx,
                                        std::size_t rows, std::size_t cols, WriteMode mode) {
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
    const float g = kind == SoftmaxKind::softmax ? yr[c] * (dyr[c] - dot) : dyr[c] - expf(yr[c]) * dot;
    dxr[c] = mode == WriteMode::overwrite ? g : dxr[c] + g;
  }
}

__device__ void raise_target_error(DeviceErrorRecord* error, long long target, std::size_t row, std::size_t cols) {
  // The first error wins; the host reads the record at its next synchronization.
  if (error && atomicCAS(&error->code, 0, static_cast<int>(DeviceErrorCode::target_out_of_range)) == 0) {
    error->op = static_cast<int>(OpTag::cross_entropy);
    error->value = target;
    error->position = static_cast<long long>(row);
    error->bound = static_cast<long long>(cols);
    __threadfence_system();
  }
}

template <class Target>
__global__ void cross_entropy_forward_kernel(const float* logits, const Target* targets, float* loss, float* lse,
                                             std::size_t rows, std::size_t cols, DeviceErrorRecord* error) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* xr = logits + row * cols;
  const float row_lse = warp_row_logsumexp(xr, cols, lane);
  if (lane != 0) return;
  lse[row] = row_lse;
  const long long target = static_cast<long long>(targets[row]);
  if (target < 0 || target >= static_cast<long long>(cols)) {
    loss[row] = 0.0f;
    raise_target_error(error, target, row, cols);
    return;
  }
  loss[row] = row_lse - xr[target];
}

template <class Target>
__global__ void cross_entropy_backward_kernel(const float* logits, const Target* targets, const float* lse,
                                              const float* grad_scale, float row_scale, float* dlogits,
                                              std::size_t rows, std::size_t cols, WriteMode mode) {
  const std::size_t n = rows * cols;
  const float scale = *grad_scale * row_scale;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const std::size_t r = i / cols, c = i % cols;
    const float p = expf(logits[i] - lse[r]);
    const float onehot = static_cast<long long>(c) == static_cast<long long>(targets[r]) ? 1.0f : 0.0f;
    const float g = (p - onehot) * scale;
    dlogits[i] = mode == WriteMode::overwrite ? g : dlogits[i] + g;
  }
}

// One warp per row writes the row's gradient and loss; the last block to arrive sums the losses.
// No thread returns early: every thread of every block must reach the __syncthreads below.
template <class Target>
__global__ void cross_entropy_fused_kernel(const float* logits, const Target* targets, float* dlogits,
                                           float* row_loss, float* batch_loss, float* loss_sum, std::size_t rows,
                                           std::size_t cols, float row_scale, DeviceErrorRecord* error,
                                           unsigned* blocks_done) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row < rows) {
    const float* xr = logits + row * cols;
    float* dr = dlogits + row * cols;
    const long long target = static_cast<long long>(targets[row]);
    const bool bad = target < 0 || target >= static_cast<long long>(cols);
    const float lse = warp_row_logsumexp(xr, cols, lane);
    for (std::size_t c = lane; c < cols; c += kWarp) {
      const float onehot = static_cast<long long>(c) == target ? 1.0f : 0.0f;
      dr[c] = bad ? 0.0f : (expf(xr[c] - lse) - onehot) * row_scale;
    }
    if (lane == 0) {
      row_loss[row] = bad ? 0.0f : lse - xr[target];
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
    if (!isfinite(total) && error &&
        atomicCAS(&error->code, 0, static_cast<int>(DeviceErrorCode::non_finite)) == 0) {
      error->op = static_cast<int>(OpTag::loss_check);
      __threadfence_system();
    }
    *blocks_done = 0;  // ready for the next launch (or graph replay)
  }
}

unsigned warp_rows_grid(std::size_t rows) { return static_cast<unsigned>(ceil_div(rows, kWarpsPerBlock)); }

}  // namespace

void softmax_forward(SoftmaxKind kind, const float* x, float* y, std::size_t rows, std::size_t cols,
                     cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  softmax_forward_kernel<<<warp_rows_grid(rows), kBlock, 0, stream>>>(kind, x, y, rows, cols);
  check_launch("softmax_forward", stream);
}

void softmax_backward(SoftmaxKind kind, const float* dy, const float* y, float* dx, std::size_t rows,
                      std::size_t cols, WriteMode mode, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  softmax_backward_kernel<<<warp_rows_grid(rows), kBlock, 0, stream>>>(kind, dy, y, dx, rows, cols, mode);
  check_launch("softmax_backward", stream);
}

template <class Target>
void cross_entropy_forward(const float* logits, const Target* targets, float* loss, float* lse, std::size_t rows,
                           std::size_t cols, DeviceErrorRecord* error, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_forward_kernel<<<warp_rows_grid(rows), kBlock, 0, stream>>>(logits, targets, loss, lse, rows,
                                                                            cols, error);
  check_launch("cross_entropy_forward", stream);
}

template <class Target>
void cross_entropy_backward(const float* logits, const Target* targets, const float* lse, const float* grad_scale,
                            float row_scale, float* dlogits, std::size_t rows, std::size_t cols, WriteMode mode,
                            cudaStream_t stream) {
  const std::size_t n = rows * cols;
  if (n == 0) return;
  cross_entropy_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(logits, targets, lse, grad_scale, row_scale,
                                                                    dlogits, rows, cols, mode);
  check_launch("cross_entropy_backward", stream);
}

template <class Target>
void cross_entropy_fused(const float* logits, const Target* targets, float* dlogits, float* row_loss,
                         float* batch_loss, float* loss_sum, std::size_t rows, std::size_t cols, float row_scale,
                         DeviceErrorRecord* error, unsigned* blocks_done, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_fused_kernel<<<warp_rows_grid(rows), kBlock, 0, stream>>>(
      logits, targets, dlogits, row_loss, batch_loss, loss_sum, rows, cols, row_scale, error, blocks_done);
  check_launch("cross_entropy_fused", stream);
}

#define EMBER_INSTANTIATE(Target)                                                                          \
  template void cross_entropy_forward<Target>(const float*, const Target*, float*, float*, std::size_t,    \
                                              std::size_t, DeviceErrorRecord*, cudaStream_t);              \
  template void cross_entropy_backward<Target>(const float*, const Target*, const float*, const float*,    \
                                               float, float*, std::size_t, std::size_t, WriteMode,         \
                                               cudaStream_t);                                \
  template void cross_entropy_fused<Target>(const float*, const Target*, float*, float*, float*, float*,  \
                                            std::size_t, std::size_t, float, DeviceErrorRecord*,         \
                                            unsigned*, cudaStream_t);
EMBER_INSTANTIATE(std::int32_t)
EMBER_INSTANTIATE(std::int64_t)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cuda
