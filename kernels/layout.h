// Kernels that move elements without arithmetic: a copying transpose of the last two dims, and a
// strided block copy that concatenation and slicing along any dim are built from.
// Same conventions as elementwise.h: CPU synchronous, CUDA enqueued on `stream`, size 0 a no-op.
// Element types: any trivially copyable type on the CPU; float, double, int32, int64 and uint8
// on CUDA (instantiated in kernels/cuda/layout.cu).
#pragma once

#include "kernels/common.h"

namespace ember::kernels::cpu {

// y[b, j, i] = x[b, i, j] for x of shape [batch, rows, cols].
template <class T>
void transpose_last2(const T* x, T* y, std::size_t batch, std::size_t rows, std::size_t cols);

// Copies `rows` runs of `cols` contiguous elements: dst[r*dst_ld + c] = src[r*src_ld + c].
// Concatenation along dim d of a row-major tensor is one such copy per input, with rows = the
// product of the dims before d and cols = size(d)·(product of the dims after d).
template <class T>
void copy_2d(const T* src, std::size_t src_ld, T* dst, std::size_t dst_ld, std::size_t rows, std::size_t cols);

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

template <class T>
void transpose_last2(const T* x, T* y, std::size_t batch, std::size_t rows, std::size_t cols, cudaStream_t stream);
template <class T>
void copy_2d(const T* src, std::size_t src_ld, T* dst, std::size_t dst_ld, std::size_t rows, std::size_t cols,
             cudaStream_t stream);

}  // namespace ember::kernels::cuda
