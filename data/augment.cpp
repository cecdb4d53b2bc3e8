// Augmentation of u8 images.
#include "data/augment.h"

#include <algorithm>
#include <vector>

#include "base/counter_random.h"
#include "base/error.h"

namespace ember::data {

std::string Augmentation::describe() const {
  if (!any()) return "none";
  std::string text = crop_padding > 0 ? detail::concat("random crop (padding ", crop_padding, ")") : "";
  if (horizontal_flip) text += std::string(text.empty() ? "" : ", ") + "horizontal flip";
  return text;
}

void augment(const Augmentation& a, std::uint8_t* image, std::int64_t height, std::int64_t width, std::uint64_t seed,
             std::int64_t epoch, std::size_t index) {
  if (!a.any()) return;
  // Three draws per image from the counter-based stream (base/counter_random.h): counter (epoch, index, k),
  // the epoch in the top 24 bits (datasets stay far below 2^38 images).
  const std::uint64_t first = (static_cast<std::uint64_t>(epoch) << 40) + 3 * static_cast<std::uint64_t>(index);
  auto draw = [&](std::uint64_t k) { return counter_uniform(seed, first + k); };
  const std::int64_t p = a.crop_padding;
  std::int64_t dy = 0, dx = 0;  // the crop's corner in the padded image, minus the padding
  if (p > 0) {
    const auto offset = [&](float u) {
      return std::min<std::int64_t>(static_cast<std::int64_t>(u * (2 * p + 1)), 2 * p) - p;
    };
    dy = offset(draw(0));
    dx = offset(draw(1));
  }
  const bool flip = a.horizontal_flip && draw(2) < 0.5f;
  if (dy == 0 && dx == 0 && !flip) return;
  const std::vector<std::uint8_t> source(image, image + height * width);
  for (std::int64_t y = 0; y < height; ++y)
    for (std::int64_t x = 0; x < width; ++x) {
      const std::int64_t sy = y + dy, sx = (flip ? width - 1 - x : x) + dx;
      image[y * width + x] = (sy >= 0 && sy < height && sx >= 0 && sx < width) ? source[sy * width + sx] : 0;
    }
}

}  // namespace ember::data
