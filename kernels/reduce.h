// Reductions. Deterministic: the same input gives bit-identical output run after run (fixed
// reduction trees, no floating-point atomics), because their results feed training.
//
// The general sum views the input as row-major [outer, reduce, inner] and writes
// out[o, i] = scale · Σ_r x[o, r, i], overwriting `out` ([outer, inner]); scale = 1 gives the
// sum, 1/reduce the mean. Sum over everything is outer = inner = 1; the bias gradient of a
// [B, N] activation is outer = 1, reduce = B, inner = N.
// CPU: float sums accumulate in double. CUDA: f32 sums (of f32, bf16 or f16 data), and a long reduction over few
// rows or few columns is split in two passes through `workspace` (sum_workspace_size elements;
// may be null when that is 0). Reducing zero elements gives 0·scale: 0 for a sum, NaN for a mean
// (scale = 1/0), on both backends, as in PyTorch.
#pragma once

#include "kernels/common.h"

namespace ember::kernels {
std::size_t sum_workspace_size(std::size_t outer, std::size_t reduce, std::size_t inner);
}

namespace ember::kernels::cpu {

template <class T>
void sum(const T* x, T* out, std::size_t outer, std::size_t reduce, std::size_t inner, T scale);
// For each of `rows` rows of length `cols` (cols ≥ 1): the largest value and the index of its
// first occurrence. NaN counts as larger than any number. Either output may be null.
template <class T>
void max_last_dim(const T* x, T* values, std::int64_t* indices, std::size_t rows, std::size_t cols);
// *count = number of i with a[i] == b[i]: accuracy from predictions and targets.
template <class A, class B>
void count_equal(const A* a, const B* b, std::int64_t* count, std::size_t n);

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

// T and Out each float, bfloat16 or float16: the sums in f32 (16-bit inputs widened exactly), each
// result rounded once to Out — for 16-bit data the bits of the f32 kernel on widened copies. The
// workspace is f32 whatever the types.
template <class T, class Out>
void sum(const T* x, Out* out, std::size_t outer, std::size_t reduce, std::size_t inner, float scale, float* workspace,
         cudaStream_t stream);
void max_last_dim(const float* x, float* values, std::int64_t* indices, std::size_t rows, std::size_t cols,
                  cudaStream_t stream);
// `count` is a device pointer; it is overwritten (integer atomics inside are exact).
template <class A, class B>
void count_equal(const A* a, const B* b, std::int64_t* count, std::size_t n, cudaStream_t stream);

}  // namespace ember::kernels::cuda
