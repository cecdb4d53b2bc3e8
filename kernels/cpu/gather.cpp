// CPU twin of the batch gather.
#include "kernels/gather.h"
#include "kernels/elementwise_math.h"

namespace ember::kernels::cpu {

void gather_batch(const std::uint8_t* images, const std::int32_t* labels, const std::int32_t* index, float* x,
                  std::int32_t* y, std::size_t rows, std::size_t cols, float mean, float std) {
  const PixelScaling s = pixel_scaling(mean, std);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::uint8_t* src = images + static_cast<std::size_t>(index[r]) * cols;
    float* dst = x + r * cols;
    for (std::size_t c = 0; c < cols; ++c) dst[c] = scale_pixel(src[c], s);
    y[r] = labels[index[r]];
  }
}

}  // namespace ember::kernels::cpu
