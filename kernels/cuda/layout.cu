// CUDA layout kernels: tiled transpose of the last two dims and the strided block copy behind
// concatenation and slicing.
#include <cuda_runtime.h>

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/layout.h"

namespace ember::kernels::cuda {
namespace {

constexpr unsigned kTile = 32, kTileRows = 8;

// One 32×32 tile per block through shared memory, so that both the read and the write are
// coalesced; the +1 column avoids shared-memory bank conflicts on the transposed read.
template <class T>
__global__ void transpose_kernel(const T* x, T* y, std::size_t rows, std::size_t cols, std::size_t col_tiles) {
  __shared__ T tile[kTile][kTile + 1];
  // blockIdx.x enumerates the tiles of one matrix (so any shape fits in gridDim.x's 2^31−1),
  // blockIdx.y the matrices of the batch.
  const std::size_t batch_offset = static_cast<std::size_t>(blockIdx.y) * rows * cols;
  const std::size_t col0 = (blockIdx.x % col_tiles) * kTile;
  const std::size_t row0 = (blockIdx.x / col_tiles) * kTile;
  for (unsigned r = threadIdx.y; r < kTile; r += kTileRows) {
    const std::size_t row = row0 + r, col = col0 + threadIdx.x;
    if (row < rows && col < cols) tile[r][threadIdx.x] = x[batch_offset + row * cols + col];
  }
  __syncthreads();
  for (unsigned c = threadIdx.y; c < kTile; c += kTileRows) {
    const std::size_t out_row = col0 + c, out_col = row0 + threadIdx.x;  // y is [cols, rows]
    if (out_row < cols && out_col < rows) y[batch_offset + out_row * rows + out_col] = tile[threadIdx.x][c];
  }
}

template <class T>
__global__ void copy_2d_kernel(const T* src, std::size_t src_ld, T* dst, std::size_t dst_ld, std::size_t rows,
                               std::size_t cols) {
  const std::size_t n = rows * cols;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const std::size_t r = i / cols, c = i % cols;
    dst[r * dst_ld + c] = src[r * src_ld + c];
  }
}

}  // namespace

template <class T>
void transpose_last2(const T* x, T* y, std::size_t batch, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  if (batch == 0 || rows == 0 || cols == 0) return;
  constexpr std::size_t kMaxBatchPerLaunch = 65535;  // gridDim.y's limit
  const std::size_t plane = rows * cols;
  const std::size_t col_tiles = ceil_div(cols, kTile);
  const std::size_t tiles = col_tiles * ceil_div(rows, kTile);
  for (std::size_t b0 = 0; b0 < batch; b0 += kMaxBatchPerLaunch) {
    const std::size_t nb = batch - b0 < kMaxBatchPerLaunch ? batch - b0 : kMaxBatchPerLaunch;
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(nb));
    launch<transpose_kernel<T>>({grid, dim3(kTile, kTileRows)}, stream, x + b0 * plane, y + b0 * plane, rows, cols,
                                col_tiles);
  }
}

template <class T>
void copy_2d(const T* src, std::size_t src_ld, T* dst, std::size_t dst_ld, std::size_t rows, std::size_t cols,
             cudaStream_t stream) {
  launch_n<copy_2d_kernel<T>>(rows * cols, stream, src, src_ld, dst, dst_ld, rows, cols);
}

#define EMBER_INSTANTIATE(T)                                                                           \
  template void transpose_last2<T>(const T*, T*, std::size_t, std::size_t, std::size_t, cudaStream_t); \
  template void copy_2d<T>(const T*, std::size_t, T*, std::size_t, std::size_t, std::size_t, cudaStream_t);
#define EMBER_INSTANTIATE_DTYPE(name, type, ...) EMBER_INSTANTIATE(type)
EMBER_FORALL_DTYPES(EMBER_INSTANTIATE_DTYPE)  // Note [the dtype list]
#undef EMBER_INSTANTIATE_DTYPE
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cuda
