// The CPU's layer normalization (kernels/layer_norm.h): rows split across threads, each row's
// statistics in f64 (Note [layer norm's sums]).
#include "kernels/layer_norm.h"

#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {
namespace {

// Note [layer norm's sums]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A row's sums are taken in eight f64 lanes: lane j adds the elements j, j + 8, j + 16, … in
// order; then the lanes are added in order, then the last width mod 8 elements in order. The
// order depends on the width alone, so the bits are the same at any thread count, and in the
// AVX-512 loop and the baseline one alike: both compile this same code (Note [CPU dispatch]),
// GCC making the eight lanes one AVX-512 register or four SSE2 ones. A sum in one running f64
// total, element after element, could not be vectorized, and a transformer's rows are short
// (its width): the scalar loop was most of the op's time.
// Only the sums are f64. What is computed per element is computed in the element type, from the
// statistics rounded to it (as they are saved): the forward's y from mean and invstd, the
// backward's g = dy·γ and x̂ = (x − mean)·invstd (whose g and g·x̂, widened, are what the sums
// add), dx and dy·x̂. In f64 those took three times the vector operations of f32, at half the
// lanes: 9% of the ViT's training step went to layer norm. No term is fused into an FMA
// (-ffp-contract=off for this file, CMakeLists.txt), so both loops round each term alike.
constexpr std::size_t kLanes = 8;

template <class Term>
__attribute__((always_inline)) inline double row_sum(std::size_t width, Term term) {
  double lane[kLanes] = {};
  std::size_t e = 0;
  for (; e + kLanes <= width; e += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) lane[j] += term(e + j);
  double total = 0;
  for (const double v : lane) total += v;
  for (; e < width; ++e) total += term(e);
  return total;
}

template <class T>
struct ForwardRows {
  const T *x, *gamma, *beta;  // γ and β never null here: ones and zeros stand in
  T *y, *mean, *invstd;
  std::size_t width;
  double eps;

  __attribute__((always_inline)) inline void run(std::size_t first, std::size_t last) const {
    const double m = static_cast<double>(width);
    for (std::size_t r = first; r < last; ++r) {
      const T* xr = x + r * width;
      T* yr = y + r * width;
      const double row_mean = row_sum(width, [&](std::size_t e) { return static_cast<double>(xr[e]); }) / m;
      const double squares = row_sum(width, [&](std::size_t e) {
        const double centered = xr[e] - row_mean;
        return centered * centered;
      });
      mean[r] = static_cast<T>(row_mean);
      invstd[r] = static_cast<T>(batch_norm_invstd<double>(squares / m, eps));
      const T row_mean_t = mean[r], row_invstd_t = invstd[r];
      for (std::size_t e = 0; e < width; ++e)
        yr[e] = layer_norm_output<T>(xr[e], row_mean_t, row_invstd_t, gamma[e], beta[e]);
    }
  }
};

template <class T>
struct BackwardRows {
  const T *dy, *x, *gamma, *mean, *invstd;  // γ never null here: ones stand in
  T *dx, *dy_xhat;
  std::size_t width;

  __attribute__((always_inline)) inline void run(std::size_t first, std::size_t last) const {
    const T m = static_cast<T>(width);
    for (std::size_t r = first; r < last; ++r) {
      const T *dyr = dy + r * width, *xr = x + r * width;
      const T row_mean = mean[r], row_invstd = invstd[r];
      const auto g = [&](std::size_t e) { return dyr[e] * gamma[e]; };
      const auto xhat = [&](std::size_t e) { return (xr[e] - row_mean) * row_invstd; };
      const T sum_g = static_cast<T>(row_sum(width, [&](std::size_t e) { return static_cast<double>(g(e)); }));
      const T sum_g_xhat =
          static_cast<T>(row_sum(width, [&](std::size_t e) { return static_cast<double>(g(e) * xhat(e)); }));
      T* dxr = dx + r * width;
      for (std::size_t e = 0; e < width; ++e)
        dxr[e] = batch_norm_input_grad<T>(g(e), xr[e], row_mean, row_invstd, T(1), m, sum_g, sum_g_xhat);
      if (dy_xhat)
        for (std::size_t e = 0; e < width; ++e) dy_xhat[r * width + e] = dyr[e] * xhat(e);
    }
  }
};

// The same rows compiled again for AVX-512 (Note [CPU dispatch]); the same bits (Note [layer
// norm's sums]).
template <class Rows>
__attribute__((target("avx512f"), flatten)) void run_avx512(const Rows& rows, std::size_t first, std::size_t last) {
  rows.run(first, last);
}
template <class Rows>
void run_plain(const Rows& rows, std::size_t first, std::size_t last) {
  rows.run(first, last);
}

// Every row, the rows grouped into pieces of at least kElementsPerPiece values. Each row writes
// only its own outputs, so the grouping does not change a bit.
template <class Rows>
void run_rows(const Rows& rows, std::size_t count) {
  const bool avx512 = cpu_has_avx512f();
  parallel_for(
      count, items_per_piece(rows.width),
      [&](std::size_t first, std::size_t last) {
        if (avx512)
          run_avx512(rows, first, last);
        else
          run_plain(rows, first, last);
      },
      1);
}

// γ, or ones where there is none (no elementwise affine); β, or zeros.
template <class T>
const T* or_filled(const T* values, std::vector<T>& fill, std::size_t width, T value) {
  if (values) return values;
  fill.assign(width, value);
  return fill.data();
}

}  // namespace

template <class T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* invstd, std::size_t rows,
                        std::size_t width, double eps) {
  std::vector<T> ones, zeros;
  run_rows(ForwardRows<T>{x, or_filled(gamma, ones, width, T(1)), or_filled(beta, zeros, width, T(0)), y, mean, invstd,
                          width, eps},
           rows);
}

template <class T>
void layer_norm_backward(const T* dy, const T* x, const T* gamma, const T* mean, const T* invstd, T* dx, T* dy_xhat,
                         std::size_t rows, std::size_t width) {
  std::vector<T> ones;
  run_rows(BackwardRows<T>{dy, x, or_filled(gamma, ones, width, T(1)), mean, invstd, dx, dy_xhat, width}, rows);
}

#define EMBER_INSTANTIATE(T)                                                                                       \
  template void layer_norm_forward<T>(const T*, const T*, const T*, T*, T*, T*, std::size_t, std::size_t, double); \
  template void layer_norm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, std::size_t,      \
                                       std::size_t);
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cpu
