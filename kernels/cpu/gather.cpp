// CPU twin of the batch gather.
#include "kernels/gather.h"
#include "kernels/elementwise_math.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {

void gather_batch(const std::uint8_t* images, const std::int32_t* labels, const std::int32_t* index, float* x,
                  std::int32_t* y, std::size_t rows, std::size_t cols, float mean, float std) {
  const PixelScaling s = pixel_scaling(mean, std);
  // Rows in parallel: a batch of 128 MNIST images is 100K pixels, 4 pieces (Note [CPU threads]).
  parallel_for(rows, items_per_piece(cols), [&](std::size_t first, std::size_t last) {
    for (std::size_t r = first; r < last; ++r) {
      const std::uint8_t* src = images + static_cast<std::size_t>(index[r]) * cols;
      float* dst = x + r * cols;
      for (std::size_t c = 0; c < cols; ++c) dst[c] = scale_pixel(src[c], s);
      y[r] = labels[index[r]];
    }
  });
}

}  // namespace ember::kernels::cpu
