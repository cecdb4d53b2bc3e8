// The convolutions' reference sums (convolution.h).
#include "convolution.h"

#include <utility>

namespace ember_sim::cudnn_model {
namespace {

// The loops visit the products in other nestings than the header's, so that their innermost loop runs
// along contiguous memory, but keep each sum's order: the bits are those of the header's nesting.
struct Taps {
  const Geometry& g;
  // The output columns ox whose input column through kernel column kx lies inside the image: [first, end).
  std::pair<int, int> columns(int kx) const {
    int first = 0;
    while (first < g.ow && input_column(first, kx) < 0) ++first;
    int end = g.ow;
    while (end > first && input_column(end - 1, kx) >= g.w) --end;
    return {first, end};
  }
  int input_row(int oy, int ky) const { return oy * g.stride_h - g.pad_h + ky; }
  std::size_t w_index(int f, int ch, int ky, int kx) const {
    const int wy = g.flip ? g.kh - 1 - ky : ky, wx = g.flip ? g.kw - 1 - kx : kx;
    return ((std::size_t(f) * g.c + ch) * g.kh + wy) * g.kw + wx;
  }
  std::size_t x_row(int b, int ch, int iy) const { return ((std::size_t(b) * g.c + ch) * g.h + iy) * g.w; }
  // The input column of output column ox through kernel column kx.
  int input_column(int ox, int kx) const { return ox * g.stride_w - g.pad_w + kx; }
  std::size_t y_plane(int b, int f) const { return (std::size_t(b) * g.k + f) * g.oh * g.ow; }
};

}  // namespace

// y[b, f, oy, ox] = Σ over (ch, ky, kx) of x[b, ch, iy, ix] · w[f, ch, ky, kx], in that order.
std::vector<float> forward_sums(const Geometry& g, const std::vector<float>& x, const std::vector<float>& w) {
  const Taps t{g};
  std::vector<float> y(g.y_count(), 0.0f);
  for (int b = 0; b < g.n; ++b)
    for (int f = 0; f < g.k; ++f)
      for (int ch = 0; ch < g.c; ++ch)
        for (int ky = 0; ky < g.kh; ++ky)
          for (int kx = 0; kx < g.kw; ++kx) {
            const float wv = w[t.w_index(f, ch, ky, kx)];
            const auto [first, end] = t.columns(kx);
            for (int oy = 0; oy < g.oh; ++oy) {
              const int iy = t.input_row(oy, ky);
              if (iy < 0 || iy >= g.h) continue;
              const float* in = x.data() + t.x_row(b, ch, iy);
              float* out = y.data() + t.y_plane(b, f) + std::size_t(oy) * g.ow;
              for (int ox = first; ox < end; ++ox) out[ox] += in[t.input_column(ox, kx)] * wv;
            }
          }
  return y;
}

// dx[b, ch, iy, ix] = Σ over (f, oy, ox) of dy[b, f, oy, ox] · w[f, ch, ky, kx], images in `images`'
// order. For one input, ky follows from oy and kx from ox, and ox rises as kx falls: hence kx downwards.
std::vector<float> input_gradient_sums(const Geometry& g, const std::vector<int>& images, const std::vector<float>& w,
                                       const std::vector<float>& dy) {
  const Taps t{g};
  std::vector<float> dx(g.x_count(), 0.0f);
  for (int b : images)
    for (int f = 0; f < g.k; ++f)
      for (int ch = 0; ch < g.c; ++ch)
        for (int oy = 0; oy < g.oh; ++oy)
          for (int ky = 0; ky < g.kh; ++ky) {
            const int iy = t.input_row(oy, ky);
            if (iy < 0 || iy >= g.h) continue;
            const float* grad = dy.data() + t.y_plane(b, f) + std::size_t(oy) * g.ow;
            for (int kx = g.kw - 1; kx >= 0; --kx) {
              const float wv = w[t.w_index(f, ch, ky, kx)];
              const auto [first, end] = t.columns(kx);
              float* out = dx.data() + t.x_row(b, ch, iy);
              for (int ox = first; ox < end; ++ox) out[t.input_column(ox, kx)] += grad[ox] * wv;
            }
          }
  return dx;
}

// dw[f, ch, ky, kx] = Σ over (image, oy, ox) of dy[b, f, oy, ox] · x[b, ch, iy, ix], images in
// `images`' order; summed with the filters innermost (dy transposed per image), then laid out as w.
std::vector<float> weight_gradient_sums(const Geometry& g, const std::vector<int>& images, const std::vector<float>& x,
                                        const std::vector<float>& dy) {
  const Taps t{g};
  const std::size_t taps = std::size_t(g.c) * g.kh * g.kw, plane = std::size_t(g.oh) * g.ow;
  std::vector<float> by_tap(taps * g.k, 0.0f), dy_t(plane * g.k);
  for (int b : images) {
    for (int f = 0; f < g.k; ++f)
      for (std::size_t p = 0; p < plane; ++p) dy_t[p * g.k + f] = dy[t.y_plane(b, f) + p];
    for (int ch = 0; ch < g.c; ++ch)
      for (int ky = 0; ky < g.kh; ++ky)
        for (int kx = 0; kx < g.kw; ++kx) {
          float* sums = by_tap.data() + ((std::size_t(ch) * g.kh + ky) * g.kw + kx) * g.k;
          const auto [first, end] = t.columns(kx);
          for (int oy = 0; oy < g.oh; ++oy) {
            const int iy = t.input_row(oy, ky);
            if (iy < 0 || iy >= g.h) continue;
            const float* in = x.data() + t.x_row(b, ch, iy);
            for (int ox = first; ox < end; ++ox) {
              const float xv = in[t.input_column(ox, kx)];
              const float* grad = dy_t.data() + (std::size_t(oy) * g.ow + ox) * g.k;
              for (int f = 0; f < g.k; ++f) sums[f] += grad[f] * xv;
            }
          }
        }
  }
  std::vector<float> dw(g.w_count());
  for (int f = 0; f < g.k; ++f)
    for (int ch = 0; ch < g.c; ++ch)
      for (int ky = 0; ky < g.kh; ++ky)
        for (int kx = 0; kx < g.kw; ++kx)
          dw[t.w_index(f, ch, ky, kx)] = by_tap[((std::size_t(ch) * g.kh + ky) * g.kw + kx) * g.k + f];
  return dw;
}

}  // namespace ember_sim::cudnn_model
