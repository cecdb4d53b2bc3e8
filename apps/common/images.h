// Turning a photo or scan into a sample like those a model was trained on, and the picture of a
// grid of samples with their predictions (the tutorials' make_grid).
//
// Each dataset was made from its pictures in its own way, and a photo must go the same way
// (data::DatasetSpec::preprocess names it):
//   digit    MNIST: crop to the ink, fit it into 20/28 of the field keeping the aspect ratio,
//            centre it by its centre of mass;
//   article  Fashion-MNIST: trim the background, fit the longer side to the field, centre it;
//   plain    any other dataset: the whole picture resized to the field.
// All three invert a light background (dark ink on paper, an article photographed on white) to
// the datasets' light-on-black.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::apps {

// A decoded picture (apps/common/image_file.h reads one from a file).
struct GrayImage {
  int width = 0, height = 0;
  std::vector<std::uint8_t> pixels;  // row-major, 0 = black
};

// The height×width sample (0..255, light on black) for a model trained with `preprocess` data.
// Throws ValueError for a blank picture and for an unknown `preprocess`.
std::vector<std::uint8_t> prepare_image(const GrayImage& image, const std::string& preprocess, int height, int width);

struct GridCell {
  std::vector<std::uint8_t> pixels;  // height×width
  std::string predicted;
  std::string truth;  // empty when unknown
};

// A PNG of the samples in rows of ten, each labelled with its prediction (and the true class
// when known); a mistake gets a red frame and a red prediction. Written atomically.
void write_grid_png(const std::string& path, const std::vector<GridCell>& cells, int height, int width);

}  // namespace ember::apps
