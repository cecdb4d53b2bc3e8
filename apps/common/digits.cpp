// MNIST-style digit preprocessing and the prediction grid.
#include "apps/common/digits.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/serialize.h"

#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
#include <stb/stb_image.h>
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

namespace ember::apps {
namespace {

constexpr int kSide = 28, kBox = 20;
// Ink is what stands above the background by more than this share of the darkest stroke: low
// enough to keep a digit's anti-aliased rim (MNIST's own samples come back unchanged), high
// enough to ignore the grain of scanned paper.
constexpr double kInkShare = 0.05;

// Resamples src (w×h) to (ow×oh) with a box filter: each output pixel is the area-weighted mean of
// the source pixels it covers. Right for shrinking a photo and for enlarging a small crop alike.
std::vector<float> resample(const std::vector<float>& src, int w, int h, int ow, int oh) {
  std::vector<float> out(static_cast<std::size_t>(ow * oh), 0.0f);
  const double sx = static_cast<double>(w) / ow, sy = static_cast<double>(h) / oh;
  for (int oy = 0; oy < oh; ++oy) {
    const double y0 = oy * sy, y1 = (oy + 1) * sy;
    for (int ox = 0; ox < ow; ++ox) {
      const double x0 = ox * sx, x1 = (ox + 1) * sx;
      double sum = 0, area = 0;
      for (int y = static_cast<int>(y0); y < std::min(h, static_cast<int>(std::ceil(y1))); ++y) {
        const double wy = std::min<double>(y + 1, y1) - std::max<double>(y, y0);
        for (int x = static_cast<int>(x0); x < std::min(w, static_cast<int>(std::ceil(x1))); ++x) {
          const double wx = std::min<double>(x + 1, x1) - std::max<double>(x, x0);
          sum += wx * wy * src[static_cast<std::size_t>(y * w + x)];
          area += wx * wy;
        }
      }
      out[static_cast<std::size_t>(oy * ow + ox)] = area > 0 ? static_cast<float>(sum / area) : 0.0f;
    }
  }
  return out;
}

// 3×5 glyphs of the digits and 'p', 't', one row of bits per line (bit 2 = left column).
constexpr std::array<std::array<std::uint8_t, 5>, 12> kGlyphs{{
    {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1}, {7, 4, 7, 1, 7},
    {7, 4, 7, 5, 7}, {7, 1, 1, 2, 2}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7}, {7, 5, 7, 4, 4}, {2, 7, 2, 2, 3},
}};

}  // namespace

GrayImage read_gray_image(const std::string& path) {
  int w = 0, h = 0, channels = 0;
  stbi_uc* data = stbi_load(path.c_str(), &w, &h, &channels, 1);
  if (!data) throw IoError(detail::concat(path, ": cannot read the image (", stbi_failure_reason(), ")"));
  GrayImage image{w, h, std::vector<std::uint8_t>(data, data + static_cast<std::size_t>(w) * h)};
  stbi_image_free(data);
  if (w <= 0 || h <= 0) throw IoError(detail::concat(path, ": the image is empty"));
  return image;
}

std::array<std::uint8_t, 784> to_mnist_digit(const GrayImage& image) {
  const int w = image.width, h = image.height;
  // A light border means dark ink on light paper: invert to MNIST's white ink on black.
  double border = 0;
  int border_count = 0;
  for (int x = 0; x < w; ++x) {
    border += image.pixels[static_cast<std::size_t>(x)] + image.pixels[static_cast<std::size_t>((h - 1) * w + x)];
    border_count += 2;
  }
  for (int y = 0; y < h; ++y) {
    border += image.pixels[static_cast<std::size_t>(y * w)] + image.pixels[static_cast<std::size_t>(y * w + w - 1)];
    border_count += 2;
  }
  const bool invert = border / border_count > 127;
  // Ink on a zero background: invert if needed, subtract the paper's level (the median of the
  // border), and stretch the strongest stroke to 255.
  std::vector<std::uint8_t> edge;
  for (int x = 0; x < w; ++x) edge.insert(edge.end(), {image.pixels[static_cast<std::size_t>(x)], image.pixels[static_cast<std::size_t>((h - 1) * w + x)]});
  for (int y = 0; y < h; ++y) edge.insert(edge.end(), {image.pixels[static_cast<std::size_t>(y * w)], image.pixels[static_cast<std::size_t>(y * w + w - 1)]});
  std::nth_element(edge.begin(), edge.begin() + static_cast<std::ptrdiff_t>(edge.size() / 2), edge.end());
  const double paper = invert ? 255.0 - edge[edge.size() / 2] : edge[edge.size() / 2];
  std::vector<float> ink(image.pixels.size());
  float strongest = 0;
  for (std::size_t i = 0; i < ink.size(); ++i) {
    const double v = invert ? 255.0 - image.pixels[i] : image.pixels[i];
    ink[i] = static_cast<float>(std::max(0.0, v - paper));
    strongest = std::max(strongest, ink[i]);
  }
  if (strongest <= 0) throw ValueError("no digit found: the image is blank");
  const float stretch = 255.0f / strongest, threshold = static_cast<float>(kInkShare * 255.0);
  int x0 = w, y0 = h, x1 = -1, y1 = -1;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      float& v = ink[static_cast<std::size_t>(y * w + x)];
      v *= stretch;
      if (v > threshold) {
        x0 = std::min(x0, x);
        y0 = std::min(y0, y);
        x1 = std::max(x1, x);
        y1 = std::max(y1, y);
      }
    }
  if (x1 < 0) throw ValueError("no digit found: the image is blank");
  // Crop to the ink, then fit the longer side to 20 pixels.
  const int cw = x1 - x0 + 1, ch = y1 - y0 + 1;
  std::vector<float> crop(static_cast<std::size_t>(cw * ch));
  for (int y = 0; y < ch; ++y)
    for (int x = 0; x < cw; ++x)
      crop[static_cast<std::size_t>(y * cw + x)] = ink[static_cast<std::size_t>((y0 + y) * w + x0 + x)];
  const double scale = static_cast<double>(kBox) / std::max(cw, ch);
  const int ow = std::clamp(static_cast<int>(std::lround(cw * scale)), 1, kBox);
  const int oh = std::clamp(static_cast<int>(std::lround(ch * scale)), 1, kBox);
  const std::vector<float> fitted = resample(crop, cw, ch, ow, oh);
  // Centre of mass of the fitted digit, in pixel indices, moved to index 14 of the 28×28 field
  // (MNIST's own convention: its samples' centres of mass lie within half a pixel of (14, 14)).
  double mass = 0, mx = 0, my = 0;
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x) {
      const double v = fitted[static_cast<std::size_t>(y * ow + x)];
      mass += v;
      mx += v * x;
      my += v * y;
    }
  const int left = std::clamp(static_cast<int>(std::lround(kSide / 2.0 - mx / mass)), 0, kSide - ow);
  const int top = std::clamp(static_cast<int>(std::lround(kSide / 2.0 - my / mass)), 0, kSide - oh);
  std::array<std::uint8_t, 784> out{};
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x)
      out[static_cast<std::size_t>((top + y) * kSide + left + x)] =
          static_cast<std::uint8_t>(std::clamp(std::lround(fitted[static_cast<std::size_t>(y * ow + x)]), 0L, 255L));
  return out;
}

void write_grid_png(const std::string& path, const std::vector<GridCell>& cells) {
  constexpr int kScale = 2, kCellW = kSide * kScale + 8, kCellH = kSide * kScale + 20, kPerRow = 10;
  const int n = static_cast<int>(cells.size());
  const int cols = std::max(1, std::min(n, kPerRow)), rows = std::max(1, (n + kPerRow - 1) / kPerRow);
  const int width = cols * kCellW, height = rows * kCellH;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width * height * 3), 255);
  auto put = [&](int x, int y, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
    if (x < 0 || y < 0 || x >= width || y >= height) return;
    std::uint8_t* p = &rgb[static_cast<std::size_t>((y * width + x) * 3)];
    p[0] = r;
    p[1] = g;
    p[2] = b;
  };
  auto glyph = [&](int x, int y, int index, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
    for (int row = 0; row < 5; ++row)
      for (int col = 0; col < 3; ++col)
        if (kGlyphs[static_cast<std::size_t>(index)][static_cast<std::size_t>(row)] & (4 >> col))
          for (int dy = 0; dy < 2; ++dy)
            for (int dx = 0; dx < 2; ++dx) put(x + col * 2 + dx, y + row * 2 + dy, r, g, b);
  };
  for (int i = 0; i < n; ++i) {
    const GridCell& c = cells[static_cast<std::size_t>(i)];
    const int cx = (i % kPerRow) * kCellW + 4, cy = (i / kPerRow) * kCellH + 4;
    const bool mistake = c.truth >= 0 && c.predicted != c.truth;
    for (int y = 0; y < kSide * kScale; ++y)
      for (int x = 0; x < kSide * kScale; ++x) {
        const std::uint8_t v = c.pixels[static_cast<std::size_t>((y / kScale) * kSide + x / kScale)];
        put(cx + x, cy + y, v, v, v);
      }
    if (mistake)  // a red frame around a wrong prediction
      for (int t = -2; t < kSide * kScale + 2; ++t)
        for (int k = 1; k <= 2; ++k) {
          put(cx + t, cy - k, 220, 0, 0);
          put(cx + t, cy + kSide * kScale + k - 1, 220, 0, 0);
          put(cx - k, cy + t, 220, 0, 0);
          put(cx + kSide * kScale + k - 1, cy + t, 220, 0, 0);
        }
    const int ly = cy + kSide * kScale + 4;
    const std::uint8_t red = mistake ? 200 : 0;
    glyph(cx, ly, 10, red, 0, 0);  // 'p'
    if (c.predicted >= 0) glyph(cx + 8, ly, c.predicted, red, 0, 0);
    if (c.truth >= 0) {
      glyph(cx + 22, ly, 11, 0, 0, 0);  // 't'
      glyph(cx + 30, ly, c.truth, 0, 0, 0);
    }
  }
  int size = 0;
  unsigned char* png = stbi_write_png_to_mem(rgb.data(), width * 3, width, height, 3, &size);
  if (!png) throw IoError(detail::concat(path, ": could not encode the PNG"));
  const std::vector<std::uint8_t> bytes(png, png + size);
  STBIW_FREE(png);
  write_file_atomically(path, bytes);
}

}  // namespace ember::apps
