// Column sums on the GPU (device code only, never included by C++): out[j] = scale · Σ_r x(r, j)
// over the rows of a column view — sum over a middle dim ([outer, reduce, inner], j = o·inner + i),
// bias gradients ([rows, cols]), and bias_relu_backward, which masks each element on its way in.
//
// A block takes 32 adjacent columns (a warp reads 32 adjacent floats of a row: coalesced) and
// eight row phases: thread (column t, phase p) adds rows p, p + 8, ... of its chunk in order, then
// the eight phase sums are added in a fixed order. A long reduction over few columns is also split
// into row chunks across blocks (sum_workspace_size decides, from the shape alone), whose partial
// sums a second launch of the same kernel adds in chunk order. No floating-point atomics, no
// dependence on block order: the same input gives the same bits run after run.
//
// The elements are float, bfloat16 or float16 (T), summed in f32; the sums are written as Out
// (f32 or a 16-bit type), each rounded once — for 16-bit data the bits of the f32 sums of widened
// copies, rounded. Partial sums between the two passes stay in f32.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise_math.h"
#include "kernels/reduce.h"

namespace ember::kernels::cuda {

constexpr unsigned kColumnTile = kWarp;                // columns per block
constexpr unsigned kRowPhases = kBlock / kColumnTile;  // threads per column in a block

enum class ColumnSource : unsigned char {
  plain,      // x(r, j)
  relu_grad,  // dy(r, j)·[y(r, j) > 0], also written to dx (which may be dy)
};

// Element (r, j) of the view [outer, reduce, inner] with j = o·inner + i.
__device__ inline std::size_t column_element(std::size_t r, std::size_t j, std::size_t reduce, std::size_t inner) {
  return (j / inner) * reduce * inner + r * inner + j % inner;
}

// Block (tile, chunk). With one chunk the sums go to out[j]·scale; with several, chunk c's go to
// out[c·cols + j] unscaled, for the second pass.
template <ColumnSource Source, class T, class Out>
__global__ void column_sum_kernel(const T* x, const T* y, T* dx, Out* out, std::size_t reduce, std::size_t inner,
                                  std::size_t cols, std::size_t chunks, float scale) {
  __shared__ float phase_sums[kRowPhases][kColumnTile];
  const unsigned t = threadIdx.x % kColumnTile, p = threadIdx.x / kColumnTile;
  const std::size_t j = static_cast<std::size_t>(blockIdx.x) * kColumnTile + t;
  const std::size_t per_chunk = ceil_div(reduce, chunks);
  const std::size_t begin = blockIdx.y * per_chunk;
  const std::size_t end = begin + per_chunk < reduce ? begin + per_chunk : reduce;
  float acc = 0.0f;
  if (j < cols) {
    for (std::size_t r = begin + p; r < end; r += kRowPhases) {
      const std::size_t e = column_element(r, j, reduce, inner);
      if constexpr (Source == ColumnSource::relu_grad) {
        const float v =
            activation_grad_formula<ActivationGrad::relu>(static_cast<float>(x[e]), static_cast<float>(y[e]), {});
        dx[e] = T(v);  // dy or 0: exact in T
        acc += v;
      } else {
        acc += static_cast<float>(x[e]);
      }
    }
  }
  phase_sums[p][t] = acc;
  __syncthreads();
  if (p != 0 || j >= cols) return;
  float total = 0.0f;
  for (unsigned q = 0; q < kRowPhases; ++q) total += phase_sums[q][t];
  if (chunks == 1)
    out[j] = Out(total * scale);
  else
    out[blockIdx.y * cols + j] = Out(total);  // (Out is f32 then: the workspace)
}

// Sums the view [outer, reduce, inner] over `reduce` into out[outer·inner] (times scale), reading
// the elements as Source says. `workspace` holds sum_workspace_size(outer, reduce, inner) floats
// (null when that is 0). reduce = 0 gives 0·scale: 0 for a sum, NaN for a mean (scale = 1/0).
template <ColumnSource Source, class T, class Out>
void column_sum(const T* x, const T* y, T* dx, Out* out, std::size_t outer, std::size_t reduce, std::size_t inner,
                float scale, float* workspace, cudaStream_t stream) {
  const std::size_t cols = outer * inner;
  if (cols == 0) return;
  const dim3 tiles(static_cast<unsigned>(ceil_div(cols, kColumnTile)));
  const std::size_t partials = sum_workspace_size(outer, reduce, inner);
  if (partials == 0) {
    launch<column_sum_kernel<Source, T, Out>>({tiles}, stream, x, y, dx, out, reduce, inner, cols, std::size_t{1},
                                              scale);
    return;
  }
  const std::size_t chunks = partials / cols;
  launch<column_sum_kernel<Source, T, float>>({dim3(tiles.x, static_cast<unsigned>(chunks))}, stream, x, y, dx,
                                              workspace, reduce, inner, cols, chunks, scale);
  // The chunks' partial sums, [chunks, cols], added in chunk order.
  launch<column_sum_kernel<ColumnSource::plain, float, Out>>(
      {tiles}, stream, static_cast<const float*>(workspace), static_cast<const float*>(nullptr),
      static_cast<float*>(nullptr), out, chunks, cols, cols, std::size_t{1}, scale);
}

}  // namespace ember::kernels::cuda
