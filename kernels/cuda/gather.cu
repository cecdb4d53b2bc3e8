// CUDA batch gather: a grid-stride loop over the batch's pixels; the thread of each row's first
// pixel also copies the row's label.
#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise_math.h"
#include "kernels/gather.h"

namespace ember::kernels::cuda {
namespace {

__global__ void gather_batch_kernel(const std::uint8_t* images, const std::int32_t* labels, const std::int32_t* index,
                                    float* x, std::int32_t* y, std::size_t rows, std::size_t cols, PixelScaling s) {
  // Images of zero pixels still have labels: such rows get one thread each.
  const std::size_t per_row = cols > 0 ? cols : 1, n = rows * per_row;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const std::size_t r = i / per_row, c = i % per_row;
    const std::size_t src = static_cast<std::size_t>(index[r]);
    if (c < cols) x[i] = scale_pixel(images[src * cols + c], s);
    if (c == 0) y[r] = labels[src];
  }
}

}  // namespace

void gather_batch(const std::uint8_t* images, const std::int32_t* labels, const std::int32_t* index, float* x,
                  std::int32_t* y, std::size_t rows, std::size_t cols, float mean, float std, cudaStream_t stream) {
  launch_n<gather_batch_kernel>(rows * (cols > 0 ? cols : 1), stream, images, labels, index, x, y, rows, cols,
                                pixel_scaling(mean, std));
}

}  // namespace ember::kernels::cuda
