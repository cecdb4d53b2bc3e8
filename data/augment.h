// Training-time augmentation of u8 images, as torchvision's transforms a PyTorch user knows:
// RandomCrop(size, padding=p) with zero fill, then RandomHorizontalFlip(0.5). Each image's draw is
// a function of (seed, epoch, the sample's index in its dataset) alone, so a run repeats on any
// number of loader workers, batch sizes and ranks, and a resumed epoch augments as the
// uninterrupted one did.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::data {

struct Augmentation {
  int crop_padding = 0;          // p > 0: zero padding of p on every side, then a random H×W crop
  bool horizontal_flip = false;  // mirrored left to right with probability ½ (not for digits)
  bool any() const { return crop_padding > 0 || horizontal_flip; }
  // "random crop (padding 2), horizontal flip", or "none".
  std::string describe() const;
};

// Augments one height×width image in place (the crop, then the flip).
void augment(const Augmentation& augmentation, std::uint8_t* image, std::int64_t height, std::int64_t width,
             std::uint64_t seed, std::int64_t epoch, std::size_t index);

}  // namespace ember::data
