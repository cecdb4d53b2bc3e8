// A linear layer's epilogue fused: bias add and ReLU in one pass after the GEMM, and in the
// backward pass the ReLU mask and the bias gradient (column sums) in one pass.
// Shapes: y, dy, dx are [rows, cols] row-major, bias and dbias [cols].
// The column sums are deterministic: a fixed order on each backend (on CUDA, rows split as
// sum_workspace_size(1, rows, cols) says; `workspace` holds that many floats, null when 0).
// CPU: float and double (the backward also bf16), synchronous. CUDA: float (the backward also bf16
// and f16), enqueued on `stream`.
#pragma once

#include "base/half.h"
#include "kernels/common.h"

namespace ember::kernels::cpu {
// y ← max(0, y + bias), in place.
template <class T>
void bias_relu_forward(T* y, const T* bias, std::size_t rows, std::size_t cols);
// y ← y + bias, in place (a last Linear layer, which has no ReLU).
template <class T>
void bias_forward(T* y, const T* bias, std::size_t rows, std::size_t cols);
// dx = dy·[y > 0] (overwritten; dx may be dy) and dbias = Σ_rows dx (overwritten).
template <class T>
void bias_relu_backward(const T* dy, const T* y, T* dx, T* dbias, std::size_t rows, std::size_t cols);
template <>
void bias_relu_backward<bfloat16>(const bfloat16* dy, const bfloat16* y, bfloat16* dx, bfloat16* dbias,
                                  std::size_t rows, std::size_t cols);
}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {
void bias_relu_forward(float* y, const float* bias, std::size_t rows, std::size_t cols, cudaStream_t stream);
void bias_forward(float* y, const float* bias, std::size_t rows, std::size_t cols, cudaStream_t stream);
// T = float, bfloat16 or float16: the mask exact, the bias gradient summed in f32 and rounded once
// to T (the bits of the f32 kernel on widened copies).
template <class T>
void bias_relu_backward(const T* dy, const T* y, T* dx, T* dbias, std::size_t rows, std::size_t cols, float* workspace,
                        cudaStream_t stream);
}  // namespace ember::kernels::cuda
