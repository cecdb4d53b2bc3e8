// Elementwise kernels: unary maps, binary maps with NumPy-style broadcasting, the gradients of
// activations computed from their outputs, fill, dtype casts and uint8 image normalization.
//
// Contract: pointers are dense buffers of `n` elements (or the broadcast layout below) on the
// backend's own memory; outputs may alias an input of the same size (in-place is allowed).
// CPU functions are synchronous. CUDA functions enqueue on `stream` and return at once; they
// synchronize only under EMBER_SYNC_DEBUG=1. n == 0 is a no-op.
// Types: the CPU twins exist for float and double, the CUDA ones for float.
#pragma once

#include "kernels/common.h"

namespace ember::kernels {

enum class UnaryOp : std::uint8_t { neg, exp, log, sqrt, sigmoid, tanh, relu };
enum class BinaryOp : std::uint8_t { add, sub, mul, div };
// The derivative of an activation, from the activation's output y and the upstream gradient dy:
// relu: dy·[y>0]; sigmoid: dy·y·(1−y); tanh: dy·(1−y²).
enum class ActivationGrad : std::uint8_t { relu, sigmoid, tanh };

// Broadcasting layout for out = a ∘ b: the output's shape and, per dim, each input's stride in
// elements (0 where that input is broadcast along the dim). Built by core from the shapes.
inline constexpr int kMaxDims = 8;
struct BroadcastLayout {
  int ndim = 0;
  long long out_shape[kMaxDims] = {};
  long long a_stride[kMaxDims] = {};
  long long b_stride[kMaxDims] = {};
  long long numel() const {
    long long n = 1;
    for (int d = 0; d < ndim; ++d) n *= out_shape[d];
    return n;
  }
};

}  // namespace ember::kernels

namespace ember::kernels::cpu {

template <class T> void unary(UnaryOp op, const T* x, T* y, std::size_t n);
template <class T> void pow_scalar(const T* x, T exponent, T* y, std::size_t n);
// y = x·scale + shift: scalar add, sub, mul and div in one kernel.
template <class T> void affine(const T* x, T scale, T shift, T* y, std::size_t n);
// Same-shape fast path of binary(): out[i] = a[i] ∘ b[i].
template <class T> void binary(BinaryOp op, const T* a, const T* b, T* out, std::size_t n);
template <class T>
void binary_broadcast(BinaryOp op, const T* a, const T* b, T* out, const BroadcastLayout& layout);
template <class T>
void activation_grad(ActivationGrad op, const T* dy, const T* y, T* dx, std::size_t n, WriteMode mode);
template <class T> void fill(T* y, T value, std::size_t n);
// out[i] = x[broadcast source of i]·scale, using layout.a_stride (b_stride is ignored):
// broadcasting a tensor to a larger shape, e.g. the backward of sum and mean.
template <class T> void expand(const T* x, T* out, const BroadcastLayout& layout, T scale);
// Any of f32, f64, i32, i64, u8 to any other, C++ conversion rules (float→int truncates).
template <class From, class To> void cast(const From* x, To* y, std::size_t n);
// y = (x/255 − mean)/std, the data pipeline's pixel normalization.
void normalize_u8(const std::uint8_t* x, float* y, std::size_t n, float mean, float std);

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

void unary(UnaryOp op, const float* x, float* y, std::size_t n, cudaStream_t stream);
void pow_scalar(const float* x, float exponent, float* y, std::size_t n, cudaStream_t stream);
void affine(const float* x, float scale, float shift, float* y, std::size_t n, cudaStream_t stream);
void binary(BinaryOp op, const float* a, const float* b, float* out, std::size_t n, cudaStream_t stream);
void binary_broadcast(BinaryOp op, const float* a, const float* b, float* out,
                      const BroadcastLayout& layout, cudaStream_t stream);
void activation_grad(ActivationGrad op, const float* dy, const float* y, float* dx, std::size_t n,
                     WriteMode mode, cudaStream_t stream);
template <class T> void fill(T* y, T value, std::size_t n, cudaStream_t stream);
void expand(const float* x, float* out, const BroadcastLayout& layout, float scale, cudaStream_t stream);
template <class From, class To> void cast(const From* x, To* y, std::size_t n, cudaStream_t stream);
void normalize_u8(const std::uint8_t* x, float* y, std::size_t n, float mean, float std,
                  cudaStream_t stream);

}  // namespace ember::kernels::cuda
