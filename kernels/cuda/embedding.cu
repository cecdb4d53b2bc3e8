// CUDA embedding lookup and its deterministic gradient (kernels/embedding.h, Note [deterministic
// embedding gradient]): the lookup a thread per element; the gradient a bitonic sort of
// (index, position) keys, then a warp per run of equal indices.
#include <cuda_runtime.h>

#include <cstdint>

#include "base/error.h"
#include "kernels/cuda/device_error.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/embedding.h"

namespace ember::kernels::cuda {
namespace {

constexpr unsigned long long kNoKey = ~0ULL;  // a bad index: sorts last, summed nowhere
constexpr unsigned kWarpsPerBlock = kBlock / kWarp;

template <class Index>
__device__ bool valid_index(Index i, std::size_t rows) {
  return static_cast<long long>(i) >= 0 && static_cast<unsigned long long>(i) < rows;
}

template <class Index>
__global__ void embedding_forward_kernel(const float* weight, const Index* index, float* out, std::size_t n,
                                         std::size_t rows, std::size_t width, DeviceErrorRecord* error) {
  for (std::size_t e = global_thread(); e < n * width; e += grid_stride()) {
    const std::size_t i = e / width, c = e % width;
    const Index row = index[i];
    if (valid_index(row, rows)) {
      out[e] = weight[static_cast<std::size_t>(row) * width + c];
      continue;
    }
    out[e] = 0.0f;
    if (c == 0)
      raise_device_error(error, DeviceErrorCode::index_out_of_range, OpTag::embedding, static_cast<long long>(i),
                         static_cast<long long>(row), static_cast<long long>(rows));
  }
}

// The keys index·2³² + position for i < n, kNoKey for bad indices and the padding up to `count`.
template <class Index>
__global__ void embedding_keys_kernel(const Index* index, unsigned long long* keys, std::size_t n, std::size_t rows,
                                      std::size_t count) {
  for (std::size_t i = global_thread(); i < count; i += grid_stride())
    keys[i] = i < n && valid_index(index[i], rows)
                  ? (static_cast<unsigned long long>(index[i]) << 32) | static_cast<unsigned long long>(i)
                  : kNoKey;
}

// One compare-exchange step of the bitonic network: stage `size` (the bitonic runs' length),
// distance `stride`. Keys are distinct except kNoKey, so the order is the same whatever the network.
__global__ void bitonic_step_kernel(unsigned long long* keys, std::size_t count, std::size_t size, std::size_t stride) {
  for (std::size_t i = global_thread(); i < count; i += grid_stride()) {
    const std::size_t partner = i ^ stride;
    if (partner <= i) continue;
    const bool ascending = (i & size) == 0;
    const unsigned long long a = keys[i], b = keys[partner];
    if ((a > b) == ascending) {
      keys[i] = b;
      keys[partner] = a;
    }
  }
}

// A warp per sorted key; the warp at the start of each run of one index sums that run's rows of dy,
// in position order, a lane per column.
__global__ void embedding_sum_runs_kernel(const float* dy, const unsigned long long* keys, float* dweight,
                                          std::size_t n, std::size_t width, long long padding) {
  const std::size_t s = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (s >= n || keys[s] == kNoKey) return;
  const unsigned long long row = keys[s] >> 32;
  if ((s > 0 && keys[s - 1] >> 32 == row) || static_cast<long long>(row) == padding) return;
  for (std::size_t c = lane; c < width; c += kWarp) {
    float sum = 0.0f;
    for (std::size_t t = s; t < n && keys[t] != kNoKey && keys[t] >> 32 == row; ++t)
      sum += dy[(keys[t] & 0xffffffffULL) * width + c];
    dweight[row * width + c] = sum;
  }
}

}  // namespace

template <class Index>
void embedding_forward(const float* weight, const Index* index, float* out, std::size_t n, std::size_t rows,
                       std::size_t width, DeviceErrorRecord* error, cudaStream_t stream) {
  launch_n<embedding_forward_kernel<Index>>(n * width, stream, weight, index, out, n, rows, width, error);
}

template <class Index>
void embedding_backward(const float* dy, const Index* index, float* dweight, std::size_t n, std::size_t rows,
                        std::size_t width, long long padding, unsigned long long* keys, cudaStream_t stream) {
  if (rows * width > 0) CUDA_CHECK(cudaMemsetAsync(dweight, 0, rows * width * sizeof(float), stream));
  if (n == 0 || width == 0) return;
  const std::size_t count = embedding_sort_keys(n);
  launch_n<embedding_keys_kernel<Index>>(count, stream, index, keys, n, rows, count);
  for (std::size_t size = 2; size <= count; size *= 2)
    for (std::size_t stride = size / 2; stride > 0; stride /= 2)
      launch_n<bitonic_step_kernel>(count, stream, keys, count, size, stride);
  launch<embedding_sum_runs_kernel>(LaunchShape{dim3(static_cast<unsigned>(ceil_div(n, kWarpsPerBlock)))}, stream, dy,
                                    keys, dweight, n, width, padding);
}

#define EMBER_INSTANTIATE(Index)                                                                                     \
  template void embedding_forward<Index>(const float*, const Index*, float*, std::size_t, std::size_t, std::size_t,  \
                                         DeviceErrorRecord*, cudaStream_t);                                          \
  template void embedding_backward<Index>(const float*, const Index*, float*, std::size_t, std::size_t, std::size_t, \
                                          long long, unsigned long long*, cudaStream_t);
EMBER_INSTANTIATE(std::int32_t)
EMBER_INSTANTIATE(std::int64_t)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cuda
