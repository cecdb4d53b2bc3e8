// 3×3 stride-1 convolutions by Winograd's minimal filtering F(4×4, 3×3) (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks", 2016): each 4×4 block of outputs comes from a
// 6×6 input tile with 36 multiplications per channel pair instead of 144. With the matrices of
// the points 0, ±1, ±2, ∞
//
//        | 4  0 −5  0  1  0 |         |  1/4    0     0  |
//        | 0 −4 −4  1  1  0 |         | −1/6  −1/6  −1/6 |         | 1  1  1  1  1  0 |
//   Bᵀ = | 0  4 −4 −1  1  0 |     G = | −1/6   1/6  −1/6 |    Aᵀ = | 0  1 −1  2 −2  0 |
//        | 0 −2 −1  2  1  0 |         |  1/24  1/12  1/6 |         | 0  1  1  4  4  0 |
//        | 0  2 −1 −2  1  0 |         |  1/24 −1/12  1/6 |         | 0  1 −1  8 −8  1 |
//        | 0  4  0 −5  0  1 |         |  0     0     1   |
//
// a tile's outputs are Y = Aᵀ [Σ_c (G g_kc Gᵀ) ⊙ (Bᵀ d_c B)] A: the sum over input channels is, for
// each of the 36 positions ξ of a transformed tile, a GEMM  M_ξ[k, t] = Σ_c U_ξ[k, c] V_ξ[c, t]
// over all tiles t. Backward data is the same algorithm on dy (the filter turned 180°, its channel
// axes swapped, the padding 2 − pad); backward filter is the adjoint of Y in U,
// dU_ξ[k, c] = Σ_t (A dy_t Aᵀ)_ξ V_ξ[c, t], then dg = Gᵀ dU G. The identity is exact; the rounding
// is not the direct sum's: in f32 about 10× its error (a few 1e-6 relative at 32–64 channels).
// F(2×2, 3×3) rounds closer but made the CNN's step a sixth slower (docs/performance.md).
//
// Images go in chunks (kChunkTiles tiles or one image), so that a chunk's transformed tiles stay
// in cache between the transform, the 36 GEMMs and the inverse transform. Chunks are the parallel
// parts (Note [CPU threads]), each thread's tiles in its own scratch; backward filter sums them in
// a fixed number of groups (never the threads'), each into a partial, added in group order after.
#include <algorithm>
#include <utility>

#include "kernels/conv.h"
#include "kernels/cpu/winograd_transforms.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {

using namespace winograd;

namespace {

constexpr std::size_t kChunkTiles = 144;  // tiles per chunk: the best of 36–512 measured on the CNN
std::size_t images_per_chunk(const ConvGeometry& g) {
  return std::max<std::size_t>(1, kChunkTiles / tiles_per_image(g));
}
std::size_t chunk_tiles(const ConvGeometry& g) { return std::min(g.n, images_per_chunk(g)) * tiles_per_image(g); }

// Backward data as a forward convolution: dy [N, K, OH, OW] in, dx [N, C, H, W] out.
ConvGeometry data_geometry(const ConvGeometry& g) { return {g.n, g.k, g.oh(), g.ow(), g.c, 3, 3, 1, 2 - g.pad}; }

// Chunks of images: how many, and the first image and image count of chunk i.
std::size_t chunk_count(const ConvGeometry& g) { return (g.n + images_per_chunk(g) - 1) / images_per_chunk(g); }
std::pair<std::size_t, std::size_t> chunk(const ConvGeometry& g, std::size_t i) {
  return {i * images_per_chunk(g), std::min(images_per_chunk(g), g.n - i * images_per_chunk(g))};
}

// A thread's scratch: V (input tiles), M (products) and the transforms' rows, for one chunk.
template <class T>
struct Scratch {
  Planes<T> v, m;
  T* rows;
};
// The most a transform takes: the input transform's 2·kIn rows of kOut·tiles_x + 2.
std::size_t row_scratch(const ConvGeometry& g) { return 2 * kIn * (kOut * tiles_x(g) + 2); }
template <class T>
Scratch<T> thread_tiles(const ConvGeometry& g) {
  const std::size_t capacity = chunk_tiles(g), v = kTile * padded_plane(g.c, capacity),
                    m = kTile * padded_plane(g.k, capacity);
  T* data = thread_scratch<T>(0, v + m + row_scratch(g));
  return {planes(data, g.c, capacity), planes(data + v, g.k, capacity), data + v + m};
}

// Backward filter's groups of chunks, each summed into a partial dU of its own.
constexpr std::size_t kFilterGroups = 8;
std::size_t filter_groups(const ConvGeometry& g) {
  return std::min(kFilterGroups, std::max<std::size_t>(1, chunk_count(g)));
}
std::size_t transformed_filters(const ConvGeometry& g) { return kTile * g.k * g.c; }

// The forward pass with the filters transformed into U: chunk by chunk, the input transform, the
// GEMMs, then emit(M, t0, image, scratch) for each image of the chunk, whose tiles start at
// column t0 of M.
template <class T, class Emit>
void forward_transformed(const T* x, const ConvGeometry& g, const T* u, Emit emit) {
  const std::size_t per_image = tiles_per_image(g);
  parallel_parts(chunk_count(g), [&](std::size_t first_chunk, std::size_t last_chunk) {
    const Scratch<T> s = thread_tiles<T>(g);
    std::fill(s.m.data, s.m.data + kTile * s.m.plane, T(0));
    for (std::size_t c = first_chunk; c < last_chunk; ++c) {
      const auto [first, images] = chunk(g, c);
      for (std::size_t i = 0; i < images; ++i)
        input_transform(x + (first + i) * g.c * g.h * g.w, g, s.v, i * per_image, s.rows);
      for (std::size_t xi = 0; xi < kTile; ++xi)
        gemm<T>(Transpose::no, Transpose::no, g.k, images * per_image, g.c, T(1), u + xi * g.k * g.c, g.c,
                s.v.row(xi, 0), s.v.ld, T(1), s.m.row(xi, 0), s.m.ld);
      for (std::size_t i = 0; i < images; ++i) emit(s.m, i * per_image, first + i, s.rows);
    }
  });
}

template <class T>
void forward_to(const T* x, const T* bias, T* y, const ConvGeometry& g, const T* u, bool relu) {
  forward_transformed(x, g, u, [&](const Planes<T>& m, std::size_t t0, std::size_t image, T* rows) {
    output_transform(m, g, t0, bias, relu, y + image * g.k * g.oh() * g.ow(), rows);
  });
}

}  // namespace

bool winograd_applies(const ConvGeometry& g) {
  // Below 8 channels on either side the GEMMs are too thin to beat im2col's one.
  return g.kh == 3 && g.kw == 3 && g.stride == 1 && g.pad <= 2 && g.c >= 8 && g.k >= 8;
}

std::size_t winograd_workspace_elements(const ConvGeometry& g) {
  return std::max(transformed_filters(g) * filter_groups(g), transformed_filters(data_geometry(g)));
}

template <class T>
void winograd_forward(const T* x, const T* w, const T* bias, T* y, const ConvGeometry& g, T* workspace, bool relu) {
  filter_transform(w, g, false, workspace);
  forward_to(x, bias, y, g, workspace, relu);
}

bool winograd_pools_tiles(const ConvGeometry& g, const PoolGeometry& p) {
  return winograd_applies(g) && p.kernel == 2 && p.stride == 2 && g.oh() % 2 == 0 && g.ow() % 2 == 0;
}

template <class T>
void winograd_forward_relu_max_pool2d(const T* x, const T* w, const T* bias, T* pooled, std::int32_t* argmax,
                                      const ConvGeometry& g, T* workspace) {
  filter_transform(w, g, false, workspace);
  const std::size_t per_image = g.k * (g.oh() / 2) * (g.ow() / 2);
  forward_transformed(x, g, workspace, [&](const Planes<T>& m, std::size_t t0, std::size_t image, T* rows) {
    output_transform_pooled(m, g, t0, bias, pooled + image * per_image, argmax + image * per_image, rows);
  });
}

template <class T>
void winograd_backward_data(const T* dy, const T* w, T* dx, const ConvGeometry& g, T* workspace) {
  const ConvGeometry back = data_geometry(g);
  filter_transform(w, g, true, workspace);
  forward_to<T>(dy, nullptr, dx, back, workspace, false);
}

template <class T>
void winograd_backward_filter(const T* x, const T* dy, T* dw, const ConvGeometry& g, T* workspace) {
  const std::size_t per_image = tiles_per_image(g), chunks = chunk_count(g), groups = filter_groups(g);
  const std::size_t filters = transformed_filters(g);
  std::fill(workspace, workspace + groups * filters, T(0));
  parallel_parts(groups, [&](std::size_t first_group, std::size_t last_group) {
    const Scratch<T> s = thread_tiles<T>(g);
    for (std::size_t group = first_group; group < last_group; ++group) {
      T* du = workspace + group * filters;
      // Group `group` sums the chunks [group·chunks/groups, (group+1)·chunks/groups).
      for (std::size_t c = group * chunks / groups; c < (group + 1) * chunks / groups; ++c) {
        const auto [first, images] = chunk(g, c);
        for (std::size_t i = 0; i < images; ++i) {
          input_transform(x + (first + i) * g.c * g.h * g.w, g, s.v, i * per_image, s.rows);
          output_grad_transform(dy + (first + i) * g.k * g.oh() * g.ow(), g, s.m, i * per_image, s.rows);
        }
        for (std::size_t xi = 0; xi < kTile; ++xi)
          gemm<T>(Transpose::no, Transpose::yes, g.k, g.c, images * per_image, T(1), s.m.row(xi, 0), s.m.ld,
                  s.v.row(xi, 0), s.v.ld, T(1), du + xi * g.k * g.c, g.c);
      }
    }
  });
  // The partials added in group order, element by element.
  parallel_for(filters, 4096, [&](std::size_t begin, std::size_t end) {
    for (std::size_t group = 1; group < groups; ++group) {
      const T* partial = workspace + group * filters;
      for (std::size_t i = begin; i < end; ++i) workspace[i] += partial[i];
    }
  });
  filter_grad_transform(workspace, g, dw);
}

#define EMBER_INSTANTIATE(T)                                                                          \
  template void winograd_forward<T>(const T*, const T*, const T*, T*, const ConvGeometry&, T*, bool); \
  template void winograd_forward_relu_max_pool2d<T>(const T*, const T*, const T*, T*, std::int32_t*,  \
                                                    const ConvGeometry&, T*);                         \
  template void winograd_backward_data<T>(const T*, const T*, T*, const ConvGeometry&, T*);           \
  template void winograd_backward_filter<T>(const T*, const T*, T*, const ConvGeometry&, T*);
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cpu
