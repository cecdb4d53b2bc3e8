// CPU convolutions by im2col + GEMM (Winograd's path is in winograd.cpp, max pooling in pool.cpp),
// per-channel bias and batch normalization.
// Per-channel statistics accumulate in double, in a fixed order.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/conv.h"

#include "kernels/batch_norm_math.h"
#include "kernels/cpu_features.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {

namespace {

// The output columns x ∈ [first, last) whose input column x·stride + tap − pad lies inside a
// width of `width` (the rest see the zero padding).
struct Span {
  std::size_t first, last;
};
Span inside(std::size_t tap, std::size_t pad, std::size_t stride, std::size_t width, std::size_t out) {
  // x·stride + tap ≥ pad and x·stride + tap − pad < width.
  const std::size_t first = tap >= pad ? 0 : (pad - tap + stride - 1) / stride;
  const std::size_t limit = width + pad > tap ? (width + pad - tap + stride - 1) / stride : 0;
  const std::size_t last = std::min(out, limit);
  return {std::min(first, last), last};
}

// Visits the im2col correspondence row by row: for kernel tap (ci, ky, kx) and output row y,
// `row(columns_row, image_row, kx, span)` gets the columns' row segment and the input row it
// reads, where output column x ∈ span reads image_row[x·stride + kx − pad]; `outside(columns_row)`
// gets a row wholly in the padding. Pointer types are left open: im2col reads the image, col2im
// writes it.
template <class ColumnPtr, class ImagePtr, class Row, class Outside>
void for_each_tap_row(const ConvGeometry& g, ColumnPtr columns, ImagePtr image, Row row, Outside outside) {
  const std::size_t oh = g.oh(), ow = g.ow();
  for (std::size_t ci = 0; ci < g.c; ++ci)
    for (std::size_t ky = 0; ky < g.kh; ++ky)
      for (std::size_t kx = 0; kx < g.kw; ++kx) {
        ColumnPtr tap = columns + ((ci * g.kh + ky) * g.kw + kx) * oh * ow;
        const Span span = inside(kx, g.pad, g.stride, g.w, ow);
        for (std::size_t y = 0; y < oh; ++y) {
          const long long iy = static_cast<long long>(y * g.stride + ky) - static_cast<long long>(g.pad);
          if (iy < 0 || iy >= static_cast<long long>(g.h))
            outside(tap + y * ow);
          else
            row(tap + y * ow, image + (ci * g.h + static_cast<std::size_t>(iy)) * g.w, kx, span);
        }
      }
}

// ---- AVX-512 forms for stride 1 and output rows of at most 32 columns (the CNN's: 26 and 24) ----
// (Note [CPU dispatch].) Each row of a tap is one register, the padding zeroed (or skipped) by the
// mask of the columns that see the image, so the walk is a load and a store a row: the walk above,
// per segment, cost more than the copy (im2col was 18% of the bf16 CNN step, col2im 6%).

bool rows_fit_a_register(const ConvGeometry& g, std::size_t lanes) { return g.stride == 1 && g.ow() <= lanes; }

// Lanes [first, last) set.
std::uint32_t lane_mask(std::size_t first, std::size_t last) {
  return static_cast<std::uint32_t>(((std::uint64_t{1} << last) - 1) & ~((std::uint64_t{1} << first) - 1));
}

// Where output column 0 of a tap row would read: kx − pad before the image row (possibly before
// it; only the span's lanes are read), as an address, not a pointer outside its array.
const void* row_origin(const void* image_row, std::size_t kx, std::size_t pad, std::size_t element) {
  return reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(image_row) + kx * element - pad * element);
}

// The walk both use: for each tap (ci, ky, kx) and output row y, `row(image_row, outside, index,
// kx, span)` with the offset of the image row it reads (`outside`: it lies in the padding) and the
// tap row's index in the columns. Rows in order, or (`alternate`) the even ones, then the odd
// ones: a masked store blocks a later load from the same 64 bytes, whatever the masks, and the
// next row of the image starts within them.
template <class Row>
__attribute__((always_inline)) inline void for_each_tap_row_stride1(const ConvGeometry& g, bool alternate, Row row) {
  const std::size_t oh = g.oh(), ow = g.ow(), step = alternate ? 2 : 1;
  std::size_t tap = 0;
  for (std::size_t ci = 0; ci < g.c; ++ci)
    for (std::size_t ky = 0; ky < g.kh; ++ky)
      for (std::size_t kx = 0; kx < g.kw; ++kx, ++tap) {
        const Span span = inside(kx, g.pad, 1, g.w, ow);
        for (std::size_t first = 0; first < step; ++first)
          for (std::size_t y = first; y < oh; y += step) {
            const std::size_t iy = y + ky;  // + pad: inside when pad ≤ iy < h + pad
            const bool outside = iy < g.pad || iy >= g.h + g.pad;
            row(outside ? std::size_t{0} : (ci * g.h + iy - g.pad) * g.w, outside, tap * oh + y, kx, span);
          }
      }
}

__attribute__((target("avx512f,avx512bw"), flatten)) void im2col_16bit_avx512(const bfloat16* image, bfloat16* columns,
                                                                              const ConvGeometry& g) {
  const std::size_t ow = g.ow();
  const bfloat16* end = columns + g.c * g.kh * g.kw * g.oh() * ow;
  const auto whole_row = static_cast<__mmask32>(lane_mask(0, ow));
  for_each_tap_row_stride1(
      g, false,
      [&](std::size_t image_row, bool outside, std::size_t index, std::size_t kx, Span span)
          __attribute__((target("avx512f,avx512bw"))) {
            bfloat16* out = columns + index * ow;
            const __m512i values =
                outside ? _mm512_setzero_si512()
                        : _mm512_maskz_loadu_epi16(static_cast<__mmask32>(lane_mask(span.first, span.last)),
                                                   row_origin(image + image_row, kx, g.pad, sizeof(bfloat16)));
            // Stored whole where the columns go on past the row (the values
            // after it are written later): a masked store costs several
            // times a plain one on some CPUs (AMD's Zen 4 and 5).
            if (end - out >= 32)
              _mm512_storeu_si512(out, values);
            else
              _mm512_mask_storeu_epi16(out, whole_row, values);
          });
}

}  // namespace

template <class T>
void im2col(const T* image, T* columns, const ConvGeometry& g) {
  if constexpr (std::is_same_v<T, bfloat16>)
    if (rows_fit_a_register(g, 32) && cpu_has_avx512bw()) return im2col_16bit_avx512(image, columns, g);
  // Row (ci, ky, kx) of the columns holds, for every output position, the input pixel that the
  // kernel tap (ky, kx) of channel ci sees there. Stride 1 copies whole row segments.
  const std::size_t ow = g.ow(), stride = g.stride, pad = g.pad;
  for_each_tap_row(
      g, columns, image,
      [&](T* out, const T* in, std::size_t kx, Span span) {
        std::fill(out, out + span.first, T(0));
        if (stride == 1) {
          // A plain loop, not std::copy: the segments are short (an output row), and a memmove
          // call per segment costs more than the copy.
          const T* from = in + (span.first + kx - pad);
          T* to = out + span.first;
          for (std::size_t i = 0; i < span.last - span.first; ++i) to[i] = from[i];
        } else
          for (std::size_t x = span.first; x < span.last; ++x) out[x] = in[x * stride + kx - pad];
        std::fill(out + span.last, out + ow, T(0));
      },
      [&](T* out) { std::fill(out, out + ow, T(0)); });
}

namespace {

// col2im's form: two registers a row, added into the image under the span's masks (a plain store
// would write over the next image row), even rows first (see the walk). Each pixel still gets its
// terms in tap order, as in the plain loop: a tap adds to a pixel from one row only.
__attribute__((target("avx512f"), flatten)) void col2im_f32_avx512(const float* columns, float* image,
                                                                   const ConvGeometry& g) {
  const std::size_t ow = g.ow();
  for_each_tap_row_stride1(
      g, true,
      [&](std::size_t image_row, bool outside, std::size_t index, std::size_t kx,
          Span span) __attribute__((target("avx512f"))) {
        if (outside) return;
        const float* from = columns + index * ow;
        auto* to = static_cast<float*>(const_cast<void*>(row_origin(image + image_row, kx, g.pad, sizeof(float))));
        const std::uint32_t inside = lane_mask(span.first, span.last);
        for (std::size_t half = 0; half < 2 && 16 * half < ow; ++half) {
          const auto mask = static_cast<__mmask16>(inside >> (16 * half));
          float* at = to + 16 * half;
          _mm512_mask_storeu_ps(
              at, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, at), _mm512_maskz_loadu_ps(mask, from + 16 * half)));
        }
      });
}

}  // namespace

template <class T>
void col2im(const T* columns, T* image, const ConvGeometry& g) {
  if constexpr (std::is_same_v<T, float>)
    if (rows_fit_a_register(g, 32) && cpu_has_avx512bw()) return col2im_f32_avx512(columns, image, g);
  // The same correspondence read the other way: each column entry is added to its pixel.
  const std::size_t stride = g.stride, pad = g.pad;
  for_each_tap_row(
      g, columns, image,
      [&](const T* row, T* out, std::size_t kx, Span span) {
        if (stride == 1) {
          T* to = out + (span.first + kx - pad);
          const T* from = row + span.first;
          for (std::size_t i = 0; i < span.last - span.first; ++i) to[i] += from[i];
        } else {
          for (std::size_t x = span.first; x < span.last; ++x) out[x * stride + kx - pad] += row[x];
        }
      },
      [](const T*) {});
}

namespace {
// Backward filter's groups of images (im2col path), each summed into a partial of its own: a
// function of the batch, never of the threads (Note [CPU threads]).
constexpr std::size_t kFilterGroups = 8;
std::size_t filter_groups(const ConvGeometry& g) { return std::min(kFilterGroups, std::max<std::size_t>(1, g.n)); }
std::size_t patch_size(const ConvGeometry& g) { return g.c * g.kh * g.kw; }
}  // namespace

std::size_t conv2d_workspace_elements(const ConvGeometry& g) {
  return winograd_applies(g) ? winograd_workspace_elements(g) : filter_groups(g) * g.k * patch_size(g);
}

// The im2col path: images are the parallel parts, each thread's columns in its own scratch.
template <class T>
void conv2d_forward(const T* x, const T* w, const T* bias, T* y, const ConvGeometry& g, T* workspace, bool relu) {
  if (winograd_applies(g)) return winograd_forward(x, w, bias, y, g, workspace, relu);
  const std::size_t patch = patch_size(g), out = g.oh() * g.ow();
  parallel_parts(g.n, [&](std::size_t first, std::size_t last) {
    T* columns = thread_scratch<T>(0, patch * out);
    for (std::size_t i = first; i < last; ++i) {
      T* yi = y + i * g.k * out;
      // With a bias, the output starts as the bias and the GEMM adds to it (β = 1): one pass over
      // an image's output while it is in cache, instead of a pass over the whole batch afterwards.
      if (bias)
        for (std::size_t k = 0; k < g.k; ++k) std::fill(yi + k * out, yi + (k + 1) * out, bias[k]);
      im2col(x + i * g.c * g.h * g.w, columns, g);
      gemm<T>(Transpose::no, Transpose::no, g.k, out, patch, T(1), w, patch, columns, out, bias ? T(1) : T(0), yi, out);
      if (relu) unary<T>(UnaryOp::relu, yi, yi, g.k * out);
    }
  });
}

template <class T>
void conv2d_backward_data(const T* dy, const T* w, T* dx, const ConvGeometry& g, T* workspace) {
  if (winograd_applies(g)) return winograd_backward_data(dy, w, dx, g, workspace);
  const std::size_t patch = patch_size(g), out = g.oh() * g.ow(), image = g.c * g.h * g.w;
  parallel_parts(g.n, [&](std::size_t first, std::size_t last) {
    T* columns = thread_scratch<T>(0, patch * out);
    std::fill(dx + first * image, dx + last * image, T(0));
    for (std::size_t i = first; i < last; ++i) {
      gemm<T>(Transpose::yes, Transpose::no, patch, out, g.k, T(1), w, patch, dy + i * g.k * out, out, T(0), columns,
              out);
      col2im(columns, dx + i * image, g);
    }
  });
}

template <class T>
void conv2d_backward_filter(const T* x, const T* dy, T* dw, const ConvGeometry& g, T* workspace) {
  if (winograd_applies(g)) return winograd_backward_filter(x, dy, dw, g, workspace);
  const std::size_t patch = patch_size(g), out = g.oh() * g.ow(), groups = filter_groups(g), filters = g.k * patch;
  // Group j sums its images in order, each GEMM adding to the group's partial; the partials are
  // then added in group order: the same sum, in the same order, every run and at any thread count.
  parallel_parts(groups, [&](std::size_t first_group, std::size_t last_group) {
    T* columns = thread_scratch<T>(0, patch * out);
    for (std::size_t group = first_group; group < last_group; ++group) {
      T* partial = workspace + group * filters;
      const std::size_t first = group * g.n / groups, last = (group + 1) * g.n / groups;
      if (first == last) std::fill(partial, partial + filters, T(0));
      for (std::size_t i = first; i < last; ++i) {
        im2col(x + i * g.c * g.h * g.w, columns, g);
        gemm<T>(Transpose::no, Transpose::yes, g.k, patch, out, T(1), dy + i * g.k * out, out, columns, out,
                i == first ? T(0) : T(1), partial, patch);
      }
    }
  });
  std::copy(workspace, workspace + filters, dw);
  for (std::size_t group = 1; group < groups; ++group)
    for (std::size_t i = 0; i < filters; ++i) dw[i] += workspace[group * filters + i];
}

std::size_t conv2d_relu_max_pool2d_workspace_elements(const ConvGeometry& g, const PoolGeometry& p) {
  return winograd_pools_tiles(g, p) ? winograd_workspace_elements(g)
                                    : conv2d_workspace_elements(g) + g.n * g.k * g.oh() * g.ow();
}

template <class T>
void conv2d_relu_max_pool2d_forward(const T* x, const T* w, const T* bias, T* pooled, std::int32_t* argmax,
                                    const ConvGeometry& g, const PoolGeometry& p, T* workspace) {
  if (winograd_pools_tiles(g, p)) return winograd_forward_relu_max_pool2d(x, w, bias, pooled, argmax, g, workspace);
  T* y = workspace + conv2d_workspace_elements(g);
  conv2d_forward(x, w, bias, y, g, workspace, true);
  max_pool2d_forward(y, pooled, argmax, p);
}

template <class T>
void channel_bias_add(T* y, const T* bias, std::size_t n, std::size_t c, std::size_t hw) {
  parallel_for(
      n * c, items_per_piece(hw),
      [&](std::size_t first, std::size_t last) {
        for (std::size_t at = first; at < last; ++at) {
          T* plane = y + at * hw;
          const T b = bias[at % c];
          for (std::size_t p = 0; p < hw; ++p) plane[p] += b;
        }
      },
      1);
}

template <class T, class Out>
void channel_bias_grad(const T* dy, Out* dbias, std::size_t n, std::size_t c, std::size_t hw) {
  // Each plane is summed in Out over eight interleaved partial sums (so the loop vectorizes), the
  // planes in double; the same order every run. bf16 gradients are summed in f32 as their widened
  // copies would be (Note [half precision]).
  constexpr std::size_t lanes = 8;
  parallel_for(
      c, items_per_piece(n * hw),
      [&](std::size_t first, std::size_t last) {
        for (std::size_t ch = first; ch < last; ++ch) {
          double acc = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const T* plane = dy + (i * c + ch) * hw;
            Out partial[lanes] = {};
            std::size_t p = 0;
            for (; p + lanes <= hw; p += lanes)
              for (std::size_t l = 0; l < lanes; ++l) partial[l] += static_cast<Out>(plane[p + l]);
            for (; p < hw; ++p) partial[0] += static_cast<Out>(plane[p]);
            for (const Out v : partial) acc += v;
          }
          dbias[ch] = static_cast<Out>(acc);
        }
      },
      1);
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

// y = x·scale + shift over channel ch of every image (NCHW): batch norm's affine map, training or not.
template <class T>
void scale_channel(const T* x, T* y, std::size_t n, std::size_t c, std::size_t hw, std::size_t ch, T scale, T shift) {
  for (std::size_t i = 0; i < n; ++i) {
    const T* in = x + (i * c + ch) * hw;
    T* out = y + (i * c + ch) * hw;
    for (std::size_t p = 0; p < hw; ++p) out[p] = in[p] * scale + shift;
  }
}

template <class T>
void batch_norm_forward_train(const T* x, const T* gamma, const T* beta, T* y, T* save_mean, T* save_invstd,
                              T* running_mean, T* running_var, std::size_t n, std::size_t c, std::size_t hw, T momentum,
                              T eps) {
  const double m = static_cast<double>(n * hw);
  for (std::size_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    channel_moments(x, n, c, hw, ch, mean, var);
    const double invstd = batch_norm_invstd<double>(var, eps);
    save_mean[ch] = static_cast<T>(mean);
    save_invstd[ch] = static_cast<T>(invstd);
    // An empty batch (m = 0) has NaN statistics; the running ones stay as they were, as PyTorch
    // leaves them.
    if (m == 0) continue;
    running_mean[ch] = static_cast<T>(batch_norm_running<double>(running_mean[ch], mean, momentum));
    running_var[ch] =
        static_cast<T>(batch_norm_running<double>(running_var[ch], batch_norm_unbiased_var(var, n * hw), momentum));
    const auto affine = batch_norm_affine<double>(mean, invstd, gamma[ch], beta[ch]);
    const T scale = static_cast<T>(affine.scale), shift = static_cast<T>(affine.shift);
    scale_channel(x, y, n, c, hw, ch, scale, shift);
  }
}

template <class T>
void batch_norm_forward_eval(const T* x, const T* gamma, const T* beta, const T* running_mean, const T* running_var,
                             T* y, std::size_t n, std::size_t c, std::size_t hw, T eps) {
  for (std::size_t ch = 0; ch < c; ++ch) {
    const double invstd = batch_norm_invstd<double>(running_var[ch], eps);
    const auto affine = batch_norm_affine<double>(running_mean[ch], invstd, gamma[ch], beta[ch]);
    const T scale = static_cast<T>(affine.scale), shift = static_cast<T>(affine.shift);
    scale_channel(x, y, n, c, hw, ch, scale, shift);
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
    for (std::size_t i = 0; i < n; ++i) {
      const T* g = dy + (i * c + ch) * hw;
      const T* in = x + (i * c + ch) * hw;
      T* out = dx + (i * c + ch) * hw;
      for (std::size_t p = 0; p < hw; ++p)
        out[p] =
            static_cast<T>(batch_norm_input_grad<double>(g[p], in[p], mean, invstd, gamma[ch], m, sum_dy, sum_dy_xhat));
    }
  }
}

#define EMBER_INSTANTIATE(T)                                                                                      \
  template void im2col<T>(const T*, T*, const ConvGeometry&);                                                     \
  template void col2im<T>(const T*, T*, const ConvGeometry&);                                                     \
  template void conv2d_forward<T>(const T*, const T*, const T*, T*, const ConvGeometry&, T*, bool);               \
  template void conv2d_backward_data<T>(const T*, const T*, T*, const ConvGeometry&, T*);                         \
  template void conv2d_backward_filter<T>(const T*, const T*, T*, const ConvGeometry&, T*);                       \
  template void conv2d_relu_max_pool2d_forward<T>(const T*, const T*, const T*, T*, std::int32_t*,                \
                                                  const ConvGeometry&, const PoolGeometry&, T*);                  \
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
template void im2col<bfloat16>(const bfloat16*, bfloat16*, const ConvGeometry&);  // the bf16 convolution's
template void channel_bias_grad<bfloat16, float>(const bfloat16*, float*, std::size_t, std::size_t, std::size_t);
template void channel_bias_grad<float16, float>(const float16*, float*, std::size_t, std::size_t, std::size_t);

}  // namespace ember::kernels::cpu
