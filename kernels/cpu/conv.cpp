// CPU convolution helpers (im2col, col2im), max pooling, per-channel bias and batch normalization.
// Per-channel statistics accumulate in double, in a fixed order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/conv.h"

namespace ember::kernels::cpu {

template <class T>
void im2col(const T* image, T* columns, const ConvGeometry& g) {
  const std::size_t oh = g.oh(), ow = g.ow();
  // Row (ci, ky, kx) of the columns holds, for every output position, the input pixel that the
  // kernel tap (ky, kx) of channel ci sees there.
  for (std::size_t ci = 0; ci < g.c; ++ci)
    for (std::size_t ky = 0; ky < g.kh; ++ky)
      for (std::size_t kx = 0; kx < g.kw; ++kx) {
        T* row = columns + ((ci * g.kh + ky) * g.kw + kx) * oh * ow;
        for (std::size_t y = 0; y < oh; ++y) {
          const long long iy = static_cast<long long>(y * g.stride + ky) - static_cast<long long>(g.pad);
          T* out = row + y * ow;
          if (iy < 0 || iy >= static_cast<long long>(g.h)) {
            std::fill(out, out + ow, T(0));
            continue;
          }
          const T* in = image + (ci * g.h + static_cast<std::size_t>(iy)) * g.w;
          for (std::size_t x = 0; x < ow; ++x) {
            const long long ix = static_cast<long long>(x * g.stride + kx) - static_cast<long long>(g.pad);
            out[x] = (ix < 0 || ix >= static_cast<long long>(g.w)) ? T(0) : in[ix];
          }
        }
      }
}

template <class T>
void col2im(const T* columns, T* image, const ConvGeometry& g) {
  const std::size_t oh = g.oh(), ow = g.ow();
  for (std::size_t ci = 0; ci < g.c; ++ci)
    for (std::size_t ky = 0; ky < g.kh; ++ky)
      for (std::size_t kx = 0; kx < g.kw; ++kx) {
        const T* row = columns + ((ci * g.kh + ky) * g.kw + kx) * oh * ow;
        for (std::size_t y = 0; y < oh; ++y) {
          const long long iy = static_cast<long long>(y * g.stride + ky) - static_cast<long long>(g.pad);
          if (iy < 0 || iy >= static_cast<long long>(g.h)) continue;
          T* out = image + (ci * g.h + static_cast<std::size_t>(iy)) * g.w;
          for (std::size_t x = 0; x < ow; ++x) {
            const long long ix = static_cast<long long>(x * g.stride + kx) - static_cast<long long>(g.pad);
            if (ix >= 0 && ix < static_cast<long long>(g.w)) out[ix] += row[y * ow + x];
          }
        }
      }
}

template <class T>
void max_pool2d_forward(const T* x, T* y, std::int32_t* argmax, const PoolGeometry& g) {
  const std::size_t oh = g.oh(), ow = g.ow();
  for (std::size_t plane = 0; plane < g.n * g.c; ++plane) {
    const T* in = x + plane * g.h * g.w;
    for (std::size_t oy = 0; oy < oh; ++oy)
      for (std::size_t ox = 0; ox < ow; ++ox) {
        std::size_t best = oy * g.stride * g.w + ox * g.stride;
        for (std::size_t ky = 0; ky < g.kernel; ++ky)
          for (std::size_t kx = 0; kx < g.kernel; ++kx) {
            const std::size_t i = (oy * g.stride + ky) * g.w + ox * g.stride + kx;
            if (in[i] > in[best] || (std::isnan(in[i]) && !std::isnan(in[best]))) best = i;
          }
        const std::size_t o = plane * oh * ow + oy * ow + ox;
        y[o] = in[best];
        argmax[o] = static_cast<std::int32_t>(best);
      }
  }
}

template <class T>
void max_pool2d_backward(const T* dy, const std::int32_t* argmax, T* dx, const PoolGeometry& g) {
  const std::size_t oh = g.oh(), ow = g.ow();
  std::fill(dx, dx + g.n * g.c * g.h * g.w, T(0));
  for (std::size_t plane = 0; plane < g.n * g.c; ++plane)
    for (std::size_t o = 0; o < oh * ow; ++o)
      dx[plane * g.h * g.w + static_cast<std::size_t>(argmax[plane * oh * ow + o])] += dy[plane * oh * ow + o];
}

template <class T>
void channel_bias_add(T* y, const T* bias, std::size_t n, std::size_t c, std::size_t hw) {
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t ch = 0; ch < c; ++ch) {
      T* plane = y + (i * c + ch) * hw;
      const T b = bias[ch];
      for (std::size_t p = 0; p < hw; ++p) plane[p] += b;
    }
}

template <class T>
void channel_bias_grad(const T* dy, T* dbias, std::size_t n, std::size_t c, std::size_t hw) {
  for (std::size_t ch = 0; ch < c; ++ch) {
    double acc = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const T* plane = dy + (i * c + ch) * hw;
      for (std::size_t p = 0; p < hw; ++p) acc += plane[p];
    }
    dbias[ch] = static_cast<T>(acc);
  }
}

namespace {
// Mean and biased variance of channel `ch` over (N, H, W), two passes for accuracy.
template <class T>
void channel_moments(const T* x, std::size_t n, std::size_t c, std::size_t hw, std::size_t ch, double& mean,
                     double& var) {
  const double m = static_cast<double>(n * hw);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const T* plane = x + (i * c + ch) * hw;
    for (std::size_t p = 0; p < hw; ++p) sum += plane[p];
  }
  mean = sum / m;
  double sq = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const T* plane = x + (i * c + ch) * hw;
    for (std::size_t p = 0; p < hw; ++p) sq += (plane[p] - mean) * (plane[p] - mean);
  }
  var = sq / m;
}
}  // namespace

template <class T>
void batch_norm_forward_train(const T* x, const T* gamma, const T* beta, T* y, T* save_mean, T* save_invstd,
                              T* running_mean, T* running_var, std::size_t n, std::size_t c, std::size_t hw, T momentum,
                              T eps) {
  const double m = static_cast<double>(n * hw);
  for (std::size_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    channel_moments(x, n, c, hw, ch, mean, var);
    const double invstd = 1.0 / std::sqrt(var + eps);
    save_mean[ch] = static_cast<T>(mean);
    save_invstd[ch] = static_cast<T>(invstd);
    // An empty batch (m = 0) has NaN statistics; the running ones stay as they were, as PyTorch
    // leaves them.
    if (m == 0) continue;
    const double unbiased = m > 1 ? var * m / (m - 1) : var;
    running_mean[ch] = static_cast<T>((1 - momentum) * running_mean[ch] + momentum * mean);
    running_var[ch] = static_cast<T>((1 - momentum) * running_var[ch] + momentum * unbiased);
    const T scale = static_cast<T>(invstd * gamma[ch]), shift = static_cast<T>(beta[ch] - mean * invstd * gamma[ch]);
    for (std::size_t i = 0; i < n; ++i) {
      const T* in = x + (i * c + ch) * hw;
      T* out = y + (i * c + ch) * hw;
      for (std::size_t p = 0; p < hw; ++p) out[p] = in[p] * scale + shift;
    }
  }
}

template <class T>
void batch_norm_forward_eval(const T* x, const T* gamma, const T* beta, const T* running_mean, const T* running_var,
                             T* y, std::size_t n, std::size_t c, std::size_t hw, T eps) {
  for (std::size_t ch = 0; ch < c; ++ch) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var[ch]) + eps);
    const T scale = static_cast<T>(invstd * gamma[ch]);
    const T shift = static_cast<T>(beta[ch] - running_mean[ch] * invstd * gamma[ch]);
    for (std::size_t i = 0; i < n; ++i) {
      const T* in = x + (i * c + ch) * hw;
      T* out = y + (i * c + ch) * hw;
      for (std::size_t p = 0; p < hw; ++p) out[p] = in[p] * scale + shift;
    }
  }
}

template <class T>
void batch_norm_backward(const T* dy, const T* x, const T* gamma, const T* save_mean, const T* save_invstd, T* dx,
                         T* dgamma, T* dbeta, std::size_t n, std::size_t c, std::size_t hw) {
  const double m = static_cast<double>(n * hw);
  for (std::size_t ch = 0; ch < c; ++ch) {
    const double mean = save_mean[ch], invstd = save_invstd[ch];
    double sum_dy = 0, sum_dy_xhat = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const T* g = dy + (i * c + ch) * hw;
      const T* in = x + (i * c + ch) * hw;
      for (std::size_t p = 0; p < hw; ++p) {
        sum_dy += g[p];
        sum_dy_xhat += g[p] * (in[p] - mean) * invstd;
      }
    }
    dgamma[ch] = static_cast<T>(sum_dy_xhat);
    dbeta[ch] = static_cast<T>(sum_dy);
    const double k = gamma[ch] * invstd / m;
    for (std::size_t i = 0; i < n; ++i) {
      const T* g = dy + (i * c + ch) * hw;
      const T* in = x + (i * c + ch) * hw;
      T* out = dx + (i * c + ch) * hw;
      for (std::size_t p = 0; p < hw; ++p) {
        const double xhat = (in[p] - mean) * invstd;
        out[p] = static_cast<T>(k * (m * g[p] - sum_dy - xhat * sum_dy_xhat));
      }
    }
  }
}

#define EMBER_INSTANTIATE(T)                                                                                      \
  template void im2col<T>(const T*, T*, const ConvGeometry&);                                                     \
  template void col2im<T>(const T*, T*, const ConvGeometry&);                                                     \
  template void max_pool2d_forward<T>(const T*, T*, std::int32_t*, const PoolGeometry&);                          \
  template void max_pool2d_backward<T>(const T*, const std::int32_t*, T*, const PoolGeometry&);                   \
  template void channel_bias_add<T>(T*, const T*, std::size_t, std::size_t, std::size_t);                         \
  template void channel_bias_grad<T>(const T*, T*, std::size_t, std::size_t, std::size_t);                        \
  template void batch_norm_forward_train<T>(const T*, const T*, const T*, T*, T*, T*, T*, T*, std::size_t,        \
                                            std::size_t, std::size_t, T, T);                                      \
  template void batch_norm_forward_eval<T>(const T*, const T*, const T*, const T*, const T*, T*, std::size_t,     \
                                           std::size_t, std::size_t, T);                                          \
  template void batch_norm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, std::size_t, \
                                       std::size_t, std::size_t);
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cpu
