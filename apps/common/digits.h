// Turning a photo or scan of a handwritten digit into an MNIST sample, the way MNIST was made:
// crop to the ink, fit it into 20×20 keeping the aspect ratio, centre it by its centre of mass in
// 28×28, with a light background inverted to MNIST's white-on-black. And the picture of a grid
// of samples with their predictions (the tutorials' make_grid).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::apps {

struct GrayImage {
  int width = 0, height = 0;
  std::vector<std::uint8_t> pixels;  // row-major, 0 = black
};

// Reads PNG, JPEG, BMP, PGM (anything stb_image reads) as grayscale. Throws IoError naming the
// file and the reason when it cannot.
GrayImage read_gray_image(const std::string& path);

// The 28×28 MNIST sample (white ink on black, 0..255). Throws ValueError for a blank image.
std::array<std::uint8_t, 784> to_mnist_digit(const GrayImage& image);

struct GridCell {
  std::array<std::uint8_t, 784> pixels;
  int predicted = -1;
  int truth = -1;  // -1 when unknown
};

// A PNG of the samples in rows, each labelled with its prediction (and the true digit when
// known: "p7 t7"); a mistake gets a red frame. Written atomically.
void write_grid_png(const std::string& path, const std::vector<GridCell>& cells);

}  // namespace ember::apps
