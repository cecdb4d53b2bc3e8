// Embedding lookup (F.embedding) over a table `weight` [rows, width] and n indices:
//   out[i, :] = weight[index[i], :].
// An index outside [0, rows) gives a row of zeros and raises DeviceErrorCode::index_out_of_range
// (OpTag::embedding) at its position (Note [which bad input is reported] in kernels/common.h).
//
// Note [deterministic embedding gradient]
// The backward overwrites dweight with, for every row r other than `padding` (< 0: none),
//   dweight[r, :] = Σ dy[i, :] over the positions i with index[i] = r, in increasing i,
// starting from zero; rows no index names, the padding row and bad indices get nothing. Both
// devices make these same additions in this same order, so they agree bit for bit, at any thread
// count and run after run — no floating-point atomics. The CPU splits the columns across threads,
// each walking every position in order. CUDA sorts the (index, position) pairs, packed as 64-bit
// keys index·2³² + position, with a bitonic network (log² n passes, one launch each); then a warp
// takes each run of equal indices and sums its positions in order. A radix sort would take fewer
// passes; the network is a few lines of plain CUDA that runs as written on any CUDA runtime.
#pragma once

#include "kernels/common.h"

namespace ember::kernels {

// The sort's key count for n indices: the next power of two (the network's width), at least 1.
constexpr std::size_t embedding_sort_keys(std::size_t n) {
  std::size_t keys = 1;
  while (keys < n) keys *= 2;
  return keys;
}

}  // namespace ember::kernels

namespace ember::kernels::cpu {

template <class T, class Index>
void embedding_forward(const T* weight, const Index* index, T* out, std::size_t n, std::size_t rows, std::size_t width,
                       DeviceErrorRecord* error);
template <class T, class Index>
void embedding_backward(const T* dy, const Index* index, T* dweight, std::size_t n, std::size_t rows, std::size_t width,
                        long long padding);

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

template <class Index>
void embedding_forward(const float* weight, const Index* index, float* out, std::size_t n, std::size_t rows,
                       std::size_t width, DeviceErrorRecord* error, cudaStream_t stream);
// keys: embedding_sort_keys(n) 64-bit words of scratch in device memory.
template <class Index>
void embedding_backward(const float* dy, const Index* index, float* dweight, std::size_t n, std::size_t rows,
                        std::size_t width, long long padding, unsigned long long* keys, cudaStream_t stream);

}  // namespace ember::kernels::cuda
