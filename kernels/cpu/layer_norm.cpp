// The CPU's layer normalization (kernels/layer_norm.h): rows split across threads, each row's
// statistics in f64, in order.
#include "kernels/layer_norm.h"

#include "kernels/parallel.h"

namespace ember::kernels::cpu {
namespace {

// body(row) for every row, rows grouped into pieces of at least kElementsPerPiece values. Each row
// writes only its own outputs, so the grouping does not change a bit.
template <class Body>
void for_each_row(std::size_t rows, std::size_t width, Body&& body) {
  parallel_for(
      rows, items_per_piece(width),
      [&](std::size_t begin, std::size_t end) {
        for (std::size_t r = begin; r < end; ++r) body(r);
      },
      1);
}

}  // namespace

template <class T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* invstd, std::size_t rows,
                        std::size_t width, double eps) {
  for_each_row(rows, width, [&](std::size_t r) {
    const T* xr = x + r * width;
    double sum = 0, squares = 0;
    for (std::size_t e = 0; e < width; ++e) sum += xr[e];
    const double row_mean = sum / static_cast<double>(width);
    for (std::size_t e = 0; e < width; ++e) squares += (xr[e] - row_mean) * (xr[e] - row_mean);
    const double row_invstd = batch_norm_invstd<double>(squares / static_cast<double>(width), eps);
    for (std::size_t e = 0; e < width; ++e)
      y[r * width + e] = static_cast<T>(
          layer_norm_output<double>(xr[e], row_mean, row_invstd, gamma ? gamma[e] : 1.0, beta ? beta[e] : 0.0));
    mean[r] = static_cast<T>(row_mean);
    invstd[r] = static_cast<T>(row_invstd);
  });
}

template <class T>
void layer_norm_backward(const T* dy, const T* x, const T* gamma, const T* mean, const T* invstd, T* dx, T* dy_xhat,
                         std::size_t rows, std::size_t width) {
  const double m = static_cast<double>(width);
  for_each_row(rows, width, [&](std::size_t r) {
    const T *dyr = dy + r * width, *xr = x + r * width;
    const double row_mean = mean[r], row_invstd = invstd[r];
    double sum_g = 0, sum_g_xhat = 0;
    for (std::size_t e = 0; e < width; ++e) {
      const double g = static_cast<double>(dyr[e]) * (gamma ? gamma[e] : 1.0);
      sum_g += g;
      sum_g_xhat += g * (xr[e] - row_mean) * row_invstd;
    }
    for (std::size_t e = 0; e < width; ++e) {
      const double g = static_cast<double>(dyr[e]) * (gamma ? gamma[e] : 1.0);
      dx[r * width + e] =
          static_cast<T>(batch_norm_input_grad<double>(g, xr[e], row_mean, row_invstd, 1.0, m, sum_g, sum_g_xhat));
      if (dy_xhat) dy_xhat[r * width + e] = static_cast<T>(dyr[e] * (xr[e] - row_mean) * row_invstd);
    }
  });
}

#define EMBER_INSTANTIATE(T)                                                                                       \
  template void layer_norm_forward<T>(const T*, const T*, const T*, T*, T*, T*, std::size_t, std::size_t, double); \
  template void layer_norm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, std::size_t,      \
                                       std::size_t);
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cpu
