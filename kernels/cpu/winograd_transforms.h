// The tile transforms of the CPU's Winograd convolutions F(4×4, 3×3) (kernels/cpu/winograd.cpp,
// whose comment gives the algorithm and its matrices): the five one-dimensional transforms, the
// tiles of an image, the transformed matrices of a chunk (Planes), and the 2-D transforms between
// them, each its line applied twice.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/conv.h"
#include "kernels/elementwise_math.h"

// The transforms' loops read and write through arrays of row pointers, which the compiler cannot
// prove apart; they never overlap, and this lets GCC's loops vectorize. Clang's equivalent,
// vectorize(assume_safety), is a warning (an error with -Werror) wherever it cannot comply, as
// under AddressSanitizer; Clang builds here are the software GPU's, where speed does not matter.
#if defined(__GNUC__) && !defined(__clang__)
#define EMBER_NO_ALIASING _Pragma("GCC ivdep")
#else
#define EMBER_NO_ALIASING
#endif

namespace ember::kernels::cpu::winograd {

inline constexpr std::size_t kOut = 4;           // outputs per tile side
inline constexpr std::size_t kIn = kOut + 2;     // inputs per tile side
inline constexpr std::size_t kTile = kIn * kIn;  // positions of a transformed tile

// The five one-dimensional transforms; each 2-D one applies its line twice (columns, then rows).
// Always inlined: a call per tile would keep the loops over tiles from vectorizing.
// Bᵀ·d: six inputs → six.
template <class T>
[[gnu::always_inline]] inline void input_line(const T (&d)[kIn], T (&o)[kIn]) {
  o[0] = T(4) * d[0] - T(5) * d[2] + d[4];
  o[1] = d[3] + d[4] - T(4) * (d[1] + d[2]);
  o[2] = d[4] - d[3] + T(4) * (d[1] - d[2]);
  o[3] = d[4] - d[2] + T(2) * (d[3] - d[1]);
  o[4] = d[4] - d[2] + T(2) * (d[1] - d[3]);
  o[5] = T(4) * d[1] - T(5) * d[3] + d[5];
}
// Aᵀ·m: six products → four outputs.
template <class T>
[[gnu::always_inline]] inline void output_line(const T (&m)[kIn], T (&o)[kOut]) {
  const T sum12 = m[1] + m[2], diff12 = m[1] - m[2], sum34 = m[3] + m[4], diff34 = m[3] - m[4];
  o[0] = m[0] + sum12 + sum34;
  o[1] = diff12 + T(2) * diff34;
  o[2] = sum12 + T(4) * sum34;
  o[3] = diff12 + T(8) * diff34 + m[5];
}
// G·g: three taps → six.
template <class T>
[[gnu::always_inline]] inline void filter_line(const T (&g)[3], T (&o)[kIn]) {
  o[0] = g[0] / T(4);
  o[1] = -(g[0] + g[1] + g[2]) / T(6);
  o[2] = -(g[0] - g[1] + g[2]) / T(6);
  o[3] = g[0] / T(24) + g[1] / T(12) + g[2] / T(6);
  o[4] = g[0] / T(24) - g[1] / T(12) + g[2] / T(6);
  o[5] = g[2];
}
// A·p (the adjoint of output_line): four output gradients → six.
template <class T>
[[gnu::always_inline]] inline void output_grad_line(const T (&p)[kOut], T (&o)[kIn]) {
  const T even = p[0] + p[2], odd = p[1] + p[3];
  o[0] = p[0];
  o[1] = even + odd;
  o[2] = even - odd;
  o[3] = p[0] + T(2) * p[1] + T(4) * p[2] + T(8) * p[3];
  o[4] = p[0] - T(2) * p[1] + T(4) * p[2] - T(8) * p[3];
  o[5] = p[3];
}
// Gᵀ·u (the adjoint of filter_line): six → three taps.
template <class T>
[[gnu::always_inline]] inline void filter_grad_line(const T (&u)[kIn], T (&o)[3]) {
  o[0] = u[0] / T(4) - (u[1] + u[2]) / T(6) + (u[3] + u[4]) / T(24);
  o[1] = (u[2] - u[1]) / T(6) + (u[3] - u[4]) / T(12);
  o[2] = (u[3] + u[4] - u[1] - u[2]) / T(6) + u[5];
}

inline std::size_t tiles_y(const ConvGeometry& g) { return (g.oh() + kOut - 1) / kOut; }
inline std::size_t tiles_x(const ConvGeometry& g) { return (g.ow() + kOut - 1) / kOut; }
inline std::size_t tiles_per_image(const ConvGeometry& g) { return tiles_y(g) * tiles_x(g); }

// The transformed matrices of a chunk, one per tile position ξ: row r of matrix ξ starts at
// data + ξ·plane + r·ld. The strides are padded off multiples of 4 KiB: with plain ones the rows
// a transform reads or writes together fall into one cache set and evict each other.
template <class T>
struct Planes {
  T* data;
  std::size_t ld, plane;
  T* row(std::size_t xi, std::size_t r) const { return data + xi * plane + r * ld; }
};
inline std::size_t padded_ld(std::size_t cols) { return (cols + 15) / 16 * 16 + 8; }
inline std::size_t padded_plane(std::size_t rows, std::size_t cols) { return rows * padded_ld(cols) + 16; }
template <class T>
Planes<T> planes(T* data, std::size_t rows, std::size_t cols) {
  return {data, padded_ld(cols), padded_plane(rows, cols)};
}

template <class T>
void copy_row(const T* __restrict from, T* __restrict to, std::size_t n, bool relu) {
  if (relu)
    for (std::size_t x = 0; x < n; ++x) to[x] = unary_formula<UnaryOp::relu>(from[x], {});
  else
    for (std::size_t x = 0; x < n; ++x) to[x] = from[x];
}

// V[ξ][c][t0 + t] for every tile t of one image: Bᵀ d B of each 6×6 input tile (zeros beyond the
// image). `rows` is scratch (row_scratch values: kernels/cpu/winograd.cpp).
template <class T>
void input_transform(const T* image, const ConvGeometry& g, const Planes<T>& v, std::size_t t0, T* rows) {
  const std::size_t ty = tiles_y(g), tx = tiles_x(g), width = kOut * tx + 2;
  T* padded = rows;               // kIn zero-padded input rows
  T* mixed = rows + kIn * width;  // Bᵀ d: kIn rows
  // Without horizontal padding the image's rows are read where they are; otherwise copied into
  // zero-padded rows.
  const bool in_place = g.pad == 0 && width <= g.w;
  for (std::size_t c = 0; c < g.c; ++c) {
    const T* plane = image + c * g.h * g.w;
    for (std::size_t y = 0; y < ty; ++y) {
      const T* in[kIn];
      for (std::size_t r = 0; r < kIn; ++r) {
        const long long iy = static_cast<long long>(kOut * y + r) - static_cast<long long>(g.pad);
        const bool inside = iy >= 0 && iy < static_cast<long long>(g.h);
        const T* row = inside ? plane + static_cast<std::size_t>(iy) * g.w : nullptr;
        if (inside && in_place) {
          in[r] = row;
          continue;
        }
        T* out = padded + r * width;
        for (std::size_t x = 0; x < width; ++x) out[x] = T(0);
        if (inside) copy_row(row, out + g.pad, std::min(width, g.pad + g.w) - g.pad, false);
        in[r] = out;
      }
      EMBER_NO_ALIASING
      for (std::size_t x = 0; x < width; ++x) {
        T d[kIn], o[kIn];
        for (std::size_t r = 0; r < kIn; ++r) d[r] = in[r][x];
        input_line(d, o);
        for (std::size_t i = 0; i < kIn; ++i) mixed[i * width + x] = o[i];
      }
      T* out[kTile];
      for (std::size_t xi = 0; xi < kTile; ++xi) out[xi] = v.row(xi, c) + t0 + y * tx;
      for (std::size_t i = 0; i < kIn; ++i) {
        const T* m = mixed + i * width;
        EMBER_NO_ALIASING
        for (std::size_t x = 0; x < tx; ++x) {
          T d[kIn], o[kIn];
          for (std::size_t j = 0; j < kIn; ++j) d[j] = m[kOut * x + j];
          input_line(d, o);
          for (std::size_t j = 0; j < kIn; ++j) out[kIn * i + j][x] = o[j];
        }
      }
    }
  }
}

// Aᵀ M A + bias for the tiles of tile row y of output channel k, at column `at` of M: the kOut
// output rows, whole tiles wide (kOut·tiles_x), into out[0..kOut). M is left zero where it was
// read, for the next chunk's GEMMs (β = 1): cheaper, while the lines are in cache, than the
// separate pass that BLAS makes over C for β = 0. `s` is scratch for kOut·kIn rows of tiles_x.
template <class T>
void tile_row_outputs(const Planes<T>& m, std::size_t k, std::size_t at, std::size_t tx, T bias, T* s,
                      T* const (&out)[kOut]) {
  T* q[kTile];
  for (std::size_t xi = 0; xi < kTile; ++xi) q[xi] = m.row(xi, k) + at;
  for (std::size_t j = 0; j < kIn; ++j) {
    EMBER_NO_ALIASING
    for (std::size_t x = 0; x < tx; ++x) {
      T d[kIn], o[kOut];
      for (std::size_t i = 0; i < kIn; ++i) {
        d[i] = q[kIn * i + j][x];
        q[kIn * i + j][x] = T(0);
      }
      output_line(d, o);
      for (std::size_t r = 0; r < kOut; ++r) s[(r * kIn + j) * tx + x] = o[r];
    }
  }
  for (std::size_t r = 0; r < kOut; ++r) {
    T* row = out[r];
    EMBER_NO_ALIASING
    for (std::size_t x = 0; x < tx; ++x) {
      T d[kIn], o[kOut];
      for (std::size_t j = 0; j < kIn; ++j) d[j] = s[(r * kIn + j) * tx + x];
      output_line(d, o);
      for (std::size_t i = 0; i < kOut; ++i) row[kOut * x + i] = o[i] + bias;
    }
  }
}

// Scratch of tile_row_outputs and the output rows.
template <class T>
void output_rows(T* rows, std::size_t tx, T* (&out)[kOut]) {
  for (std::size_t r = 0; r < kOut; ++r) out[r] = rows + kOut * kIn * tx + r * kOut * tx;
}

// y = Aᵀ M A (+ bias, ReLU) for every tile of one image, from M[ξ][k][t0 + t].
template <class T>
void output_transform(const Planes<T>& m, const ConvGeometry& g, std::size_t t0, const T* bias, bool relu, T* image,
                      T* rows) {
  const std::size_t ty = tiles_y(g), tx = tiles_x(g), oh = g.oh(), ow = g.ow();
  T* out[kOut];
  output_rows(rows, tx, out);
  for (std::size_t k = 0; k < g.k; ++k) {
    T* plane = image + k * oh * ow;
    for (std::size_t y = 0; y < ty; ++y) {
      tile_row_outputs(m, k, t0 + y * tx, tx, bias ? bias[k] : T(0), rows, out);
      for (std::size_t r = 0; r < kOut && kOut * y + r < oh; ++r)
        copy_row<T>(out[r], plane + (kOut * y + r) * ow, ow, relu);
    }
  }
}

// The same outputs through ReLU and 2×2 max pooling (stride 2, even OH and OW, so that every
// window lies in one tile): pooled [K, OH/2, OW/2] and argmax (the winner's index in the OH×OW
// plane), the candidates in max_pool2d_forward's order.
template <class T>
void output_transform_pooled(const Planes<T>& m, const ConvGeometry& g, std::size_t t0, const T* bias, T* pooled,
                             std::int32_t* argmax, T* rows) {
  const std::size_t ty = tiles_y(g), tx = tiles_x(g), ow = g.ow(), ph = g.oh() / 2, pw = g.ow() / 2;
  T* out[kOut];
  output_rows(rows, tx, out);
  for (std::size_t k = 0; k < g.k; ++k)
    for (std::size_t y = 0; y < ty; ++y) {
      tile_row_outputs(m, k, t0 + y * tx, tx, bias ? bias[k] : T(0), rows, out);
      for (std::size_t r = 0; r < kOut / 2 && (kOut / 2) * y + r < ph; ++r) {
        const std::size_t py = (kOut / 2) * y + r;
        const T* upper = out[2 * r];
        const T* lower = out[2 * r + 1];
        T* best_out = pooled + (k * ph + py) * pw;
        std::int32_t* where = argmax + (k * ph + py) * pw;
        const auto top = static_cast<std::int32_t>(2 * py * ow), width = static_cast<std::int32_t>(ow);
        for (std::size_t px = 0; px < pw; ++px) {
          const auto left = top + 2 * static_cast<std::int32_t>(px);
          const T candidates[4] = {upper[2 * px], upper[2 * px + 1], lower[2 * px], lower[2 * px + 1]};
          const std::int32_t indices[4] = {left, left + 1, left + width, left + width + 1};
          T best = unary_formula<UnaryOp::relu>(candidates[0], {});
          std::int32_t index = indices[0];
          for (std::size_t i = 1; i < 4; ++i) {
            const T candidate = unary_formula<UnaryOp::relu>(candidates[i], {});
            const bool take = pool_beats(candidate, best);
            best = take ? candidate : best;
            index = take ? indices[i] : index;
          }
          best_out[px] = best;
          where[px] = index;
        }
      }
    }
}

// dM[ξ][k][t0 + t] = A dy_t Aᵀ for every output tile of one image (dy zero beyond the output).
template <class T>
void output_grad_transform(const T* dy, const ConvGeometry& g, const Planes<T>& dm, std::size_t t0, T* rows) {
  const std::size_t ty = tiles_y(g), tx = tiles_x(g), oh = g.oh(), ow = g.ow(), width = kOut * tx;
  T* in = rows;                    // kOut gradient rows, zero-padded to whole tiles
  T* mixed = rows + kOut * width;  // A along each row: kOut rows × kIn of tiles_x
  for (std::size_t k = 0; k < g.k; ++k) {
    const T* plane = dy + k * oh * ow;
    for (std::size_t y = 0; y < ty; ++y) {
      for (std::size_t r = 0; r < kOut; ++r) {
        T* row = in + r * width;
        for (std::size_t x = 0; x < width; ++x) row[x] = T(0);
        if (kOut * y + r < oh) copy_row(plane + (kOut * y + r) * ow, row, ow, false);
        EMBER_NO_ALIASING
        for (std::size_t x = 0; x < tx; ++x) {
          T p[kOut], o[kIn];
          for (std::size_t i = 0; i < kOut; ++i) p[i] = row[kOut * x + i];
          output_grad_line(p, o);
          for (std::size_t j = 0; j < kIn; ++j) mixed[(r * kIn + j) * tx + x] = o[j];
        }
      }
      T* out[kTile];
      for (std::size_t xi = 0; xi < kTile; ++xi) out[xi] = dm.row(xi, k) + t0 + y * tx;
      for (std::size_t j = 0; j < kIn; ++j) {
        EMBER_NO_ALIASING
        for (std::size_t x = 0; x < tx; ++x) {
          T p[kOut], o[kIn];
          for (std::size_t r = 0; r < kOut; ++r) p[r] = mixed[(r * kIn + j) * tx + x];
          output_grad_line(p, o);
          for (std::size_t i = 0; i < kIn; ++i) out[kIn * i + j][x] = o[i];
        }
      }
    }
  }
}

// U[ξ][k][c] = G g Gᵀ, where g is filter (k, c), or with `flipped` the filter turned 180° with
// the channel axes swapped (backward data: U[ξ][c][k] from w[k][c]).
template <class T>
void filter_transform(const T* w, const ConvGeometry& g, bool flipped, T* u) {
  const std::size_t rows = flipped ? g.c : g.k, cols = flipped ? g.k : g.c;
  for (std::size_t k = 0; k < g.k; ++k)
    for (std::size_t c = 0; c < g.c; ++c) {
      const T* f = w + (k * g.c + c) * 9;
      T half[kIn][3];  // G g, column by column
      for (std::size_t j = 0; j < 3; ++j) {
        T column[3], o[kIn];
        for (std::size_t i = 0; i < 3; ++i) column[i] = flipped ? f[(2 - i) * 3 + (2 - j)] : f[i * 3 + j];
        filter_line(column, o);
        for (std::size_t i = 0; i < kIn; ++i) half[i][j] = o[i];
      }
      const std::size_t row = flipped ? c : k, col = flipped ? k : c;
      for (std::size_t i = 0; i < kIn; ++i) {
        T o[kIn];
        filter_line(half[i], o);
        for (std::size_t j = 0; j < kIn; ++j) u[((kIn * i + j) * rows + row) * cols + col] = o[j];
      }
    }
}

// dw[k][c] = Gᵀ dU G from dU[ξ][k][c].
template <class T>
void filter_grad_transform(const T* du, const ConvGeometry& g, T* dw) {
  for (std::size_t k = 0; k < g.k; ++k)
    for (std::size_t c = 0; c < g.c; ++c) {
      T half[3][kIn];  // Gᵀ dU, column by column
      for (std::size_t j = 0; j < kIn; ++j) {
        T column[kIn], o[3];
        for (std::size_t i = 0; i < kIn; ++i) column[i] = du[((kIn * i + j) * g.k + k) * g.c + c];
        filter_grad_line(column, o);
        for (std::size_t i = 0; i < 3; ++i) half[i][j] = o[i];
      }
      T* f = dw + (k * g.c + c) * 9;
      for (std::size_t i = 0; i < 3; ++i) {
        T o[3];
        filter_grad_line(half[i], o);
        for (std::size_t j = 0; j < 3; ++j) f[i * 3 + j] = o[j];
      }
    }
}

}  // namespace ember::kernels::cpu::winograd

#undef EMBER_NO_ALIASING
