// CUDA batch gather: a grid-stride loop over the batch's pixels; the thread of each row's first
// pixel also copies the row's label.
#include <cuda_runtime.h>

#include "kernels/cuda/grid.cuh"
#include "kernels/gather.h"

namespace ember::kernels::cuda {
namespace {

__global__ void gather_batch_kernel(const std::uint8_t* images, const std::int32_t* labels, const std::int32_t* index,
                                    float* x, std::int32_t* y, std::size_t rows, std::size_t cols, float scale,
                                    float shift) {
  const std::size_t n = rows * cols;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const std::size_t r = i / cols, c = i % cols;
    const std::size_t src = static_cast<std::size_t>(index[r]);
    x[i] = static_cast<float>(images[src * cols + c]) * scale + shift;
    if (c == 0) y[r] = labels[src];
  }
}

}  // namespace

void gather_batch(const std::uint8_t* images, const std::int32_t* labels, const std::int32_t* index, float* x,
                  std::int32_t* y, std::size_t rows, std::size_t cols, float mean, float std, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const float scale = 1.0f / (255.0f * std);  // normalize_u8's constants
  const float shift = -mean / std;
  gather_batch_kernel<<<grid_for(rows * cols), kBlock, 0, stream>>>(images, labels, index, x, y, rows, cols, scale,
                                                                    shift);
  check_launch("gather_batch", stream);
}

}  // namespace ember::kernels::cuda
