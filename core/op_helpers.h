// What the op implementations share: argument checks with PyTorch-style messages, dtype
// dispatch, the CUDA execution scope, and the switch that compiles CUDA branches away in a
// build without the CUDA backend. Internal to core/ (and to ops written the same way).
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"
#include "core/cuda.h"
#include "core/error.h"
#include "core/tensor.h"

// EMBER_CUDA_ONLY(statement): the statement in a CUDA build; in a CPU-only build an error. A
// tensor can never be on a CUDA device there, so the error is unreachable in practice.
#if EMBER_WITH_CUDA
#define EMBER_CUDA_ONLY(...) __VA_ARGS__
#else
#define EMBER_CUDA_ONLY(...) ::ember::detail::throw_built_without_cuda()
#endif

namespace ember::detail {

[[noreturn]] void throw_built_without_cuda();

// A named argument of an op, for messages: {"target", t}.
struct Arg {
  const char* name;
  const Tensor& tensor;
};

// "Expected all tensors to be on the same device, but found cuda:0 and cpu (argument 'target'
// of cross_entropy)". The first argument's device is the reference.
void check_same_device(const std::string& op, std::initializer_list<Arg> args);
std::string device_mismatch_message(const std::string& op, const std::string& argument, Device expected,
                                    Device found);
void check_defined(const std::string& op, const Arg& arg);
// "add: expected 'other' to have dtype f32 (like 'input'), but it has f64".
void check_same_dtype(const std::string& op, const Arg& a, const Arg& b);
// Floating dtypes only; f64 only on the CPU.
void check_floating(const std::string& op, const Arg& arg);
void check_dtype(const std::string& op, const Arg& arg, std::initializer_list<DType> allowed);
void check_dim(const std::string& op, const Arg& arg, int expected_dim);
int normalize_dim(const std::string& op, int dim, int ndim);  // negative dims count from the end

// A new tensor like `like` (same device) with the given shape and dtype.
Tensor new_empty(const Tensor& like, const Shape& shape, DType dtype);
inline Tensor new_empty(const Tensor& like, const Shape& shape) { return new_empty(like, shape, like.dtype()); }

// Calls f(float{}) or f(double{}) for the tensor's floating dtype.
template <class F>
decltype(auto) visit_floating(DType dtype, F&& f) {
  if (dtype == DType::f64) return f(double{});
  return f(float{});
}

// For CUDA branches: makes the tensor's device current and gives the stream to enqueue on.
class CudaScope {
 public:
  explicit CudaScope(Device device) : guard_(device), stream_(cuda::current_stream(device)) {}
  cudaStream_t stream() const { return stream_; }

 private:
  cuda::DeviceGuard guard_;
  cudaStream_t stream_;
};

}  // namespace ember::detail
