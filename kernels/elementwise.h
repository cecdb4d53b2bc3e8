// Elementwise kernels: unary maps (neg, exp, ..., relu, leaky_relu, pow, affine, erf, rsqrt, abs,
// clamp), binary maps with NumPy-style broadcasting (add ... div, maximum, minimum), the gradients
// of activations, select (where), fill, dtype casts and uint8 image normalization. The formulas are those of
// kernels/elementwise_math.h (Note [one formula per op]).
//
// Contract: pointers are dense buffers of `n` elements (or the broadcast layout below) on the
// backend's own memory; outputs may alias an input of the same size (in-place is allowed).
// CPU functions are synchronous. CUDA functions enqueue on `stream` and return at once; they
// synchronize only under EMBER_SYNC_DEBUG=1. n == 0 is a no-op.
// Types: the CPU twins exist for float and double, the CUDA ones for float (and where said, bf16
// and f16, computing in f32: compute_t).
#pragma once

#include "base/dtype.h"
#include "kernels/common.h"
#include "kernels/elementwise_math.h"

namespace ember::kernels {

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

// Several f32 tensors cast to one dtype in one launch on CUDA (the fused step's 16-bit copies of its
// parameters and input): entry i casts n[i] elements of from[i] into to[i], as cast() does.
struct CastList {
  static constexpr int kMax = 16;
  int count = 0;
  const float* from[kMax] = {};
  void* to[kMax] = {};
  std::size_t n[kMax] = {};
  bool full() const { return count == kMax; }
  void add(const float* x, void* y, std::size_t elements) {  // (the caller checks full())
    from[count] = x;
    to[count] = y;
    n[count] = elements;
    ++count;
  }
};

}  // namespace ember::kernels

namespace ember::kernels::cpu {

// y[i] = op(x[i]), with the op's parameters in `args` (see OpArgs).
template <class T>
void unary(UnaryOp op, const T* x, T* y, std::size_t n, OpArgs<T> args = {});
// Same-shape fast path of binary_broadcast(): out[i] = a[i] ∘ b[i].
template <class T>
void binary(BinaryOp op, const T* a, const T* b, T* out, std::size_t n);
template <class T>
void binary_broadcast(BinaryOp op, const T* a, const T* b, T* out, const BroadcastLayout& layout);
// dx = the activation's derivative applied to dy, from `saved` (the output y, or the input x for
// leaky_relu: see ActivationGrad); overwrites or accumulates into dx.
template <class T>
void activation_grad(ActivationGrad op, const T* dy, const T* saved, T* dx, std::size_t n, WriteMode mode,
                     OpArgs<T> args = {});
// The same in bf16, overwriting dx: f32 arithmetic on the exact widened values, rounded once (the
// bits of the f32 kernel on widened copies, Note [half precision]).
void activation_grad_bf16(ActivationGrad op, const bfloat16* dy, const bfloat16* saved, bfloat16* dx, std::size_t n,
                          OpArgs<float> args = {});
// out[i] = cond[i] ? a[i] : b[i] (cond nonzero), all dense and of n elements.
template <class T>
void select(const std::uint8_t* cond, const T* a, const T* b, T* out, std::size_t n);
template <class T>
void fill(T* y, T value, std::size_t n);
// out[i] = x[broadcast source of i]·scale, using layout.a_stride (b_stride is ignored):
// broadcasting a tensor to a larger shape, e.g. the backward of sum and mean; with strides that
// permute the input's dims, a permuted copy.
template <class T>
void expand(const T* x, T* out, const BroadcastLayout& layout, T scale);
// Any dtype to any other (Note [the dtype list]), with cast_formula's rules (floats to integers
// truncate, NaN gives 0, out-of-range values saturate; bf16 and f16 round as Note [half
// conversions] says); the typed form is for callers that know both types.
void cast(DType from, const void* x, DType to, void* y, std::size_t n);
template <class From, class To>
void cast(const From* x, To* y, std::size_t n) {
  cast(dtype_of<From>, x, dtype_of<To>, y, n);
}
void cast_list(const CastList& list, DType to);
// f32 → bf16 as cast() rounds (Note [half conversions]), on the calling thread, for kernels that
// run their own tasks (the fused attention's tiles).
void f32_to_bf16_on_this_thread(const float* x, bfloat16* y, std::size_t n);
// y = (x/255 − mean)/std, the data pipeline's pixel normalization.
void normalize_u8(const std::uint8_t* x, float* y, std::size_t n, float mean, float std);

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

// unary, binary and activation_grad take float, bfloat16 and float16 (T = bfloat16: the twin of
// cpu::activation_grad_bf16 and of the f32 kernels on widened copies, the same bits).
template <class T>
void unary(UnaryOp op, const T* x, T* y, std::size_t n, OpArgs<compute_t<T>> args, cudaStream_t stream);
template <class T>
void binary(BinaryOp op, const T* a, const T* b, T* out, std::size_t n, cudaStream_t stream);
template <class T>
void binary_broadcast(BinaryOp op, const T* a, const T* b, T* out, const BroadcastLayout& layout, cudaStream_t stream);
template <class T>
void activation_grad(ActivationGrad op, const T* dy, const T* saved, T* dx, std::size_t n, WriteMode mode,
                     OpArgs<compute_t<T>> args, cudaStream_t stream);
void select(const std::uint8_t* cond, const float* a, const float* b, float* out, std::size_t n, cudaStream_t stream);
template <class T>
void fill(T* y, T value, std::size_t n, cudaStream_t stream);
void expand(const float* x, float* out, const BroadcastLayout& layout, float scale, cudaStream_t stream);
void cast(DType from, const void* x, DType to, void* y, std::size_t n, cudaStream_t stream);
template <class From, class To>
void cast(const From* x, To* y, std::size_t n, cudaStream_t stream) {
  cast(dtype_of<From>, x, dtype_of<To>, y, n, stream);
}
void cast_list(const CastList& list, DType to, cudaStream_t stream);
void normalize_u8(const std::uint8_t* x, float* y, std::size_t n, float mean, float std, cudaStream_t stream);

}  // namespace ember::kernels::cuda
