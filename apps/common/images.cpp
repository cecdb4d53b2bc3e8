// Preparing photos the way each dataset was made, and the prediction grid.
#include "apps/common/images.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "base/error.h"
#include "core/io/serialize.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
// stb_easy_font is header-only with static functions, some of which go unused here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_easy_font.h>
#pragma GCC diagnostic pop

namespace ember::apps {
namespace {

// MNIST fits each digit into a 20×20 box of its 28×28 field.
constexpr double kDigitBoxShare = 20.0 / 28.0;
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

// A float plane of the picture, light on dark: inverted when its border is mostly light.
struct Plane {
  int width = 0, height = 0;
  std::vector<float> v;
  float noise = 0;  // how far the background strays from its level (3 median absolute deviations)
  float at(int x, int y) const { return v[static_cast<std::size_t>(y * width + x)]; }
};

std::vector<std::uint8_t> border_of(const GrayImage& image) {
  const int w = image.width, h = image.height;
  std::vector<std::uint8_t> edge;
  for (int x = 0; x < w; ++x)
    edge.insert(edge.end(),
                {image.pixels[static_cast<std::size_t>(x)], image.pixels[static_cast<std::size_t>((h - 1) * w + x)]});
  for (int y = 0; y < h; ++y)
    edge.insert(edge.end(),
                {image.pixels[static_cast<std::size_t>(y * w)], image.pixels[static_cast<std::size_t>(y * w + w - 1)]});
  return edge;
}

// Light on dark; with `subtract_background`, the background's level (the median of the border)
// is taken off so that it becomes 0.
Plane light_on_dark(const GrayImage& image, bool subtract_background) {
  std::vector<std::uint8_t> edge = border_of(image);
  double mean = 0;
  for (std::uint8_t e : edge) mean += e;
  const bool invert = mean / static_cast<double>(edge.size()) > 127;
  std::nth_element(edge.begin(), edge.begin() + static_cast<std::ptrdiff_t>(edge.size() / 2), edge.end());
  const double median = edge[edge.size() / 2];
  const double background = subtract_background ? (invert ? 255.0 - median : median) : 0.0;
  // The median absolute deviation: robust to the parts of the subject that touch the border.
  std::vector<float> deviation;
  for (std::uint8_t e : edge) deviation.push_back(static_cast<float>(std::abs(e - median)));
  const auto mid = deviation.begin() + static_cast<std::ptrdiff_t>(deviation.size() / 2);
  std::nth_element(deviation.begin(), mid, deviation.end());
  Plane p{image.width, image.height, std::vector<float>(image.pixels.size()), 3 * *mid};
  for (std::size_t i = 0; i < p.v.size(); ++i) {
    const double v = invert ? 255.0 - image.pixels[i] : image.pixels[i];
    p.v[i] = static_cast<float>(std::max(0.0, v - background));
  }
  return p;
}

struct Box {
  int x0, y0, x1, y1;  // inclusive
  int width() const { return x1 - x0 + 1; }
  int height() const { return y1 - y0 + 1; }
};

// The smallest box holding every pixel above `threshold`; a ValueError for a blank picture.
Box content_box(const Plane& p, float threshold) {
  Box b{p.width, p.height, -1, -1};
  for (int y = 0; y < p.height; ++y)
    for (int x = 0; x < p.width; ++x)
      if (p.at(x, y) > threshold) b = {std::min(b.x0, x), std::min(b.y0, y), std::max(b.x1, x), std::max(b.y1, y)};
  if (b.x1 < 0) throw ValueError("nothing to classify: the picture is blank");
  return b;
}

std::vector<float> crop(const Plane& p, const Box& b) {
  std::vector<float> out(static_cast<std::size_t>(b.width() * b.height()));
  for (int y = 0; y < b.height(); ++y)
    for (int x = 0; x < b.width(); ++x) out[static_cast<std::size_t>(y * b.width() + x)] = p.at(b.x0 + x, b.y0 + y);
  return out;
}

// Scales (w×h) to fit a box of `limit_w`×`limit_h`, keeping the aspect ratio: the output size.
std::pair<int, int> fit(int w, int h, double limit_w, double limit_h) {
  const double scale = std::min(limit_w / w, limit_h / h);
  return {std::clamp(static_cast<int>(std::lround(w * scale)), 1, static_cast<int>(limit_w)),
          std::clamp(static_cast<int>(std::lround(h * scale)), 1, static_cast<int>(limit_h))};
}

// Pastes `src` (sw×sh) into a zero field of width×height with its top-left corner at (left, top).
std::vector<std::uint8_t> paste(const std::vector<float>& src, int sw, int sh, int width, int height, int left,
                                int top) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(width * height), 0);
  for (int y = 0; y < sh; ++y)
    for (int x = 0; x < sw; ++x)
      out[static_cast<std::size_t>((top + y) * width + left + x)] =
          static_cast<std::uint8_t>(std::clamp(std::lround(src[static_cast<std::size_t>(y * sw + x)]), 0L, 255L));
  return out;
}

std::vector<std::uint8_t> as_digit(const GrayImage& image, int height, int width) {
  Plane ink = light_on_dark(image, true);
  // Stretch the strongest stroke to 255, then crop to the ink.
  const float strongest = *std::max_element(ink.v.begin(), ink.v.end());
  if (strongest <= 0) throw ValueError("no digit found: the image is blank");
  for (float& v : ink.v) v *= 255.0f / strongest;
  const Box b = content_box(ink, static_cast<float>(kInkShare * 255.0));
  const double box = std::max(1.0, std::round(std::min(height, width) * kDigitBoxShare));
  const auto [ow, oh] = fit(b.width(), b.height(), box, box);
  const std::vector<float> fitted = resample(crop(ink, b), b.width(), b.height(), ow, oh);
  // Centre of mass of the fitted digit, in pixel indices, moved to the field's centre (MNIST's
  // own convention: its samples' centres of mass lie within half a pixel of (14, 14)).
  double mass = 0, mx = 0, my = 0;
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x) {
      const double v = fitted[static_cast<std::size_t>(y * ow + x)];
      mass += v;
      mx += v * x;
      my += v * y;
    }
  const int left = std::clamp(static_cast<int>(std::lround(width / 2.0 - mx / mass)), 0, width - ow);
  const int top = std::clamp(static_cast<int>(std::lround(height / 2.0 - my / mass)), 0, height - oh);
  return paste(fitted, ow, oh, width, height, left, top);
}

// Fashion-MNIST's own steps: trim the edges close to the background, fit the longer side to the
// field, centre the shorter one, negate. "Close" was within 5% of full intensity for Zalando's
// clean studio photos; here it is 2% above the background's own noise, which keeps the faint rim
// the dataset's sharpening left on its samples (at 5%, a sample given back as a photo lost its rim
// and came back 4% larger one time in 15).
std::vector<std::uint8_t> as_article(const GrayImage& image, int height, int width) {
  const Plane p = light_on_dark(image, true);
  const Box b = content_box(p, 0.02f * 255.0f + p.noise);
  const auto [ow, oh] = fit(b.width(), b.height(), width, height);
  const std::vector<float> fitted = resample(crop(p, b), b.width(), b.height(), ow, oh);
  // Centred with the odd pixel before the article, as Fashion-MNIST's own samples are.
  return paste(fitted, ow, oh, width, height, (width - ow + 1) / 2, (height - oh + 1) / 2);
}

std::vector<std::uint8_t> as_plain(const GrayImage& image, int height, int width) {
  const Plane p = light_on_dark(image, false);
  return paste(resample(p.v, p.width, p.height, width, height), width, height, width, height, 0, 0);
}

}  // namespace

std::vector<std::uint8_t> prepare_image(const GrayImage& image, const std::string& preprocess, int height, int width) {
  if (preprocess == "digit") return as_digit(image, height, width);
  if (preprocess == "article") return as_article(image, height, width);
  if (preprocess == "plain") return as_plain(image, height, width);
  throw ValueError(detail::concat("unknown image preparation '", preprocess, "' (expected digit, article or plain)"));
}

void write_grid_png(const std::string& path, const std::vector<GridCell>& cells, int height, int width) {
  constexpr int kScale = 2, kPerRow = 10, kLine = 11;
  std::size_t longest = 1;
  for (const GridCell& c : cells) longest = std::max({longest, c.predicted.size(), c.truth.size() + 2});
  // stb_easy_font's characters are at most 6 pixels wide.
  const int cell_w = std::max(width * kScale, static_cast<int>(longest) * 6) + 8;
  const int cell_h = height * kScale + 8 + 2 * kLine;
  const int n = static_cast<int>(cells.size());
  const int cols = std::max(1, std::min(n, kPerRow)), rows = std::max(1, (n + kPerRow - 1) / kPerRow);
  const int grid_w = cols * cell_w, grid_h = rows * cell_h;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(grid_w * grid_h * 3), 255);
  auto put = [&](int x, int y, std::array<std::uint8_t, 3> color) {
    if (x < 0 || y < 0 || x >= grid_w || y >= grid_h) return;
    std::copy(color.begin(), color.end(), &rgb[static_cast<std::size_t>((y * grid_w + x) * 3)]);
  };
  // Text as stb_easy_font's quads (axis-aligned rectangles), filled.
  std::vector<char> vertices(64 * 1024);
  auto text = [&](int x, int y, const std::string& s, std::array<std::uint8_t, 3> color) {
    std::string copy = s;
    const int quads = stb_easy_font_print(static_cast<float>(x), static_cast<float>(y), copy.data(), nullptr,
                                          vertices.data(), static_cast<int>(vertices.size()));
    for (int q = 0; q < quads; ++q) {
      const float* v0 = reinterpret_cast<const float*>(vertices.data() + q * 64);       // top-left
      const float* v2 = reinterpret_cast<const float*>(vertices.data() + q * 64 + 32);  // bottom-right
      for (int py = static_cast<int>(v0[1]); py < static_cast<int>(v2[1]); ++py)
        for (int px = static_cast<int>(v0[0]); px < static_cast<int>(v2[0]); ++px) put(px, py, color);
    }
  };
  const std::array<std::uint8_t, 3> black{0, 0, 0}, red{200, 0, 0}, frame{220, 0, 0};
  for (int i = 0; i < n; ++i) {
    const GridCell& c = cells[static_cast<std::size_t>(i)];
    const int cx = (i % kPerRow) * cell_w + 4, cy = (i / kPerRow) * cell_h + 4;
    const int pw = width * kScale, ph = height * kScale;
    const bool mistake = !c.truth.empty() && c.predicted != c.truth;
    for (int y = 0; y < ph; ++y)
      for (int x = 0; x < pw; ++x) {
        const std::uint8_t v = c.pixels[static_cast<std::size_t>((y / kScale) * width + x / kScale)];
        put(cx + x, cy + y, {v, v, v});
      }
    if (mistake)  // a red frame around a wrong prediction
      for (int k = 1; k <= 2; ++k) {
        for (int t = -2; t < pw + 2; ++t) put(cx + t, cy - k, frame), put(cx + t, cy + ph + k - 1, frame);
        for (int t = -2; t < ph + 2; ++t) put(cx - k, cy + t, frame), put(cx + pw + k - 1, cy + t, frame);
      }
    text(cx, cy + ph + 3, c.predicted, mistake ? red : black);
    if (!c.truth.empty()) text(cx, cy + ph + 3 + kLine, "(" + c.truth + ")", {90, 90, 90});
  }
  int size = 0;
  unsigned char* png = stbi_write_png_to_mem(rgb.data(), grid_w * 3, grid_w, grid_h, 3, &size);
  if (!png) throw IoError(detail::concat(path, ": could not encode the PNG"));
  const std::vector<std::uint8_t> bytes(png, png + size);
  STBIW_FREE(png);
  write_file_atomically(path, bytes);
}

}  // namespace ember::apps
