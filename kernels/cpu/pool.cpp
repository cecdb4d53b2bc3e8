// CPU max pooling: each plane a parallel piece (Note [CPU threads]), its windows in order.
#include <algorithm>

#include "kernels/conv.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {

template <class T>
void max_pool2d_forward(const T* x, T* y, std::int32_t* argmax, const PoolGeometry& g) {
  const std::size_t oh = g.oh(), ow = g.ow(), plane_size = g.h * g.w;
  parallel_for(
      g.n * g.c, items_per_piece(plane_size),
      [&](std::size_t first, std::size_t last) {
        for (std::size_t plane = first; plane < last; ++plane) {
          const T* in = x + plane * plane_size;
          T* out = y + plane * oh * ow;
          std::int32_t* where = argmax + plane * oh * ow;
          if (g.kernel == 2 && g.stride == 2) {
            // The CNN's pooling, unrolled: the four candidates in the generic loop's order, chosen by
            // selects rather than branches (after a ReLU, ties of zeros make branches unpredictable),
            // so the loop over a row vectorizes.
            for (std::size_t oy = 0; oy < oh; ++oy) {
              const T* r0 = in + 2 * oy * g.w;
              const T* r1 = r0 + g.w;
              T* o = out + oy * ow;
              std::int32_t* at = where + oy * ow;
              const auto top = static_cast<std::int32_t>(2 * oy * g.w), width = static_cast<std::int32_t>(g.w);
              for (std::size_t ox = 0; ox < ow; ++ox) {
                const auto left = top + 2 * static_cast<std::int32_t>(ox);
                T best = r0[2 * ox];
                std::int32_t index = left;
                const T candidates[3] = {r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]};
                const std::int32_t indices[3] = {left + 1, left + width, left + width + 1};
                for (std::size_t i = 0; i < 3; ++i) {
                  const bool take = pool_beats(candidates[i], best);
                  best = take ? candidates[i] : best;
                  index = take ? indices[i] : index;
                }
                o[ox] = best;
                at[ox] = index;
              }
            }
            continue;
          }
          for (std::size_t oy = 0; oy < oh; ++oy)
            for (std::size_t ox = 0; ox < ow; ++ox) {
              std::size_t best = oy * g.stride * g.w + ox * g.stride;
              for (std::size_t ky = 0; ky < g.kernel; ++ky)
                for (std::size_t kx = 0; kx < g.kernel; ++kx) {
                  const std::size_t i = (oy * g.stride + ky) * g.w + ox * g.stride + kx;
                  if (pool_beats(in[i], in[best])) best = i;
                }
              out[oy * ow + ox] = in[best];
              where[oy * ow + ox] = static_cast<std::int32_t>(best);
            }
        }
      },
      1);
}

template <class T>
void max_pool2d_backward(const T* dy, const std::int32_t* argmax, T* dx, const PoolGeometry& g) {
  const std::size_t oh = g.oh(), ow = g.ow();
  parallel_for(
      g.n * g.c, items_per_piece(g.h * g.w),
      [&](std::size_t first, std::size_t last) {
        std::fill(dx + first * g.h * g.w, dx + last * g.h * g.w, T(0));
        for (std::size_t plane = first; plane < last; ++plane)
          for (std::size_t o = 0; o < oh * ow; ++o)
            dx[plane * g.h * g.w + static_cast<std::size_t>(argmax[plane * oh * ow + o])] += dy[plane * oh * ow + o];
      },
      1);
}

#define EMBER_INSTANTIATE(T)                                                             \
  template void max_pool2d_forward<T>(const T*, T*, std::int32_t*, const PoolGeometry&); \
  template void max_pool2d_backward<T>(const T*, const std::int32_t*, T*, const PoolGeometry&);
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cpu
