// What the op implementations share: argument checks with PyTorch-style messages and allocating
// outputs (reaching the kernels is core/ops/dispatch.h's). Part of the extension API (extension.h):
// ember's own ops use exactly these, and so may a layer written outside ember.
#pragma once

#include <cstdint>
#include <string>

#include "base/error.h"
#include "core/tensor/tensor.h"

namespace ember::ext {

using detail::concat;  // builds a message from any streamable values: concat("got ", n, " dims")

// A named argument of an op, for messages: {"target", t}.
struct Arg {
  const char* name;
  const Tensor& tensor;
};

// "Expected all tensors to be on the same device, but found cuda:0 and cpu (argument 'target'
// of cross_entropy)". The first argument's device is the reference.
void check_same_device(const std::string& op, std::initializer_list<Arg> args);
std::string device_mismatch_message(const std::string& op, const std::string& argument, Device expected, Device found);
void check_defined(const std::string& op, const Arg& arg);
// "add: expected 'other' to have dtype f32 (like 'input'), but it has f64".
void check_same_dtype(const std::string& op, const Arg& a, const Arg& b);
// Floating dtypes only (bf16 and f16 included); f64 only on the CPU.
void check_floating(const std::string& op, const Arg& arg);
// Note [half precision]: x converted to f32 when it is bf16 or f16, else x itself. An op given a
// 16-bit tensor runs as op(widened(x)).to(x.dtype()).
inline Tensor widened(const Tensor& x) { return x.defined() && is_half(x.dtype()) ? x.to(DType::f32) : x; }
void check_dtype(const std::string& op, const Arg& arg, std::initializer_list<DType> allowed);
void check_dim(const std::string& op, const Arg& arg, int expected_dim);
int normalize_dim(const std::string& op, int dim, int ndim);  // negative dims count from the end
// Calls f with a zero of an index tensor's element type (i64, else i32: check_dtype first).
template <class F>
void visit_index(const Tensor& index, F&& f) {
  if (index.dtype() == DType::i64)
    f(std::int64_t{});
  else
    f(std::int32_t{});
}

// Whether bf16 products and convolutions on the CPU run ember's bf16 kernels: where the CPU has
// AVX512-BF16 and EMBER_NO_AVX512_BF16 is not set. Elsewhere they widen to f32 (the scalar bf16
// GEMM, kept for tests, would be some 50× slower than f32's).
bool cpu_bf16_kernels();
// Whether `t` goes to those kernels: bf16, on the CPU, and the kernels are in use.
inline bool uses_cpu_bf16_kernels(const Tensor& t) {
  return t.dtype() == DType::bf16 && !t.is_cuda() && cpu_bf16_kernels();
}

// A new tensor like `like` (same device) with the given shape and dtype.
Tensor new_empty(const Tensor& like, const Shape& shape, DType dtype);
inline Tensor new_empty(const Tensor& like, const Shape& shape) { return new_empty(like, shape, like.dtype()); }

}  // namespace ember::ext
