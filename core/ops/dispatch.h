// The one seam between an op and its kernels: which backend runs, on which stream, for which
// element type. Every op in core/ (and every layer written the same way) reaches the kernels
// through these functions; none writes its own `is_cuda()` branch or `#if`.
//
// Note [device dispatch]
// dispatch(t, cpu, cuda) runs exactly one of the two lambdas:
//   - t on the CPU: cpu(zero), where `zero` is a value of t's floating element type (float or
//     double), so the lambda writes `using T = decltype(zero);` and calls kernels::cpu::f<T>;
//   - t on a CUDA device: that device is made current and cuda(stream) is called with the stream
//     ops on that device are issued on (kernels::cuda::f(..., stream) enqueues there; f32 only).
// The CUDA lambda must be generic — `[&](auto stream)` — and that is what keeps `#if` out of the
// ops: in a build without the CUDA backend the lambda is never instantiated, so the kernels::cuda
// functions it names need no definition, and the branch throws instead (it cannot be reached: no
// tensor can live on a CUDA device in such a build). dispatch_device() is the same without the
// dtype visit (cpu() takes no argument), for ops whose CPU code handles every dtype itself;
// dispatch_dtype() visits every dtype (Note [the dtype list]) on both backends, calling
// cpu(zero) or cuda(zero, stream), for ops that move data of any type.
#pragma once

#include <cstdint>
#include <utility>

#include "base/config.h"
#include "core/cuda/runtime.h"
#include "core/tensor/tensor.h"

namespace ember::ext {

[[noreturn]] void throw_built_without_cuda();

// Calls f(float{}) or f(double{}) for f32 or f64. Ops check their arguments first (check_floating
// names the op and the argument) and widen bf16 and f16 before they reach a kernel (Note [half
// precision] in base/half.h); this refuses the rest, so that no kernel ever reads 16-bit data
// as f32.
template <class F>
decltype(auto) visit_floating(DType dtype, F&& f) {
  if (dtype == DType::f64) return f(double{});
  EMBER_CHECK(dtype == DType::f32, DTypeError, "no kernel computes in ", dtype,
              ": convert the tensor with .to(DType::f32) first");
  return f(float{});
}

using ember::visit_dtype;  // f(T{}) for any dtype's element type (base/dtype.h)

// For CUDA code: makes the device current and gives the stream to enqueue on.
class CudaScope {
 public:
  explicit CudaScope(Device device) : guard_(device), stream_(cuda::current_stream(device)) {}
  cudaStream_t stream() const { return stream_; }

 private:
  cuda::DeviceGuard guard_;
  cudaStream_t stream_;
};

// See Note [device dispatch]. Both lambdas return the same type (often void).
template <class Cpu, class Cuda>
auto dispatch(const Tensor& on, Cpu&& cpu, [[maybe_unused]] Cuda&& cuda) -> decltype(cpu(float{})) {
  if (on.is_cuda()) {
#if EMBER_WITH_CUDA
    CudaScope scope(on.device());
    return cuda(scope.stream());
#else
    throw_built_without_cuda();
#endif
  }
  return visit_floating(on.dtype(), cpu);
}

// Whether `t` is bf16 on the CPU, where some ops have kernels of their own (computing in f32 and
// rounding once: the bits of the op on a widened copy, Note [half precision]).
inline bool is_cpu_bf16(const Tensor& t) { return t.dtype() == DType::bf16 && !t.is_cuda(); }

// dispatch() for ops whose CUDA kernels take bf16 and f16 too, computing in f32 and rounding once
// (kernels::compute_t): cuda(zero, stream) with `zero` a float, bfloat16 or float16. The CPU side
// is dispatch()'s: 16-bit data must not reach it.
// f(bfloat16{}), f(float16{}), or f(float{}) for any other dtype (the caller checked it is f32).
template <class F>
decltype(auto) visit_float_or_half(DType dtype, F&& f) {
  if (dtype == DType::bf16) return f(bfloat16{});
  if (dtype == DType::f16) return f(float16{});
  return f(float{});
}
template <class Cpu, class Cuda>
auto dispatch_with_cuda_half(const Tensor& on, Cpu&& cpu, Cuda&& cuda) -> decltype(cpu(float{})) {
  return dispatch(on, std::forward<Cpu>(cpu), [&](auto stream) {
    return visit_float_or_half(on.dtype(), [&](auto zero) { return cuda(zero, stream); });
  });
}

// dispatch() for ops with 16-bit kernels on both devices: cpu(bfloat16{}) for bf16 on the CPU
// (f16 there must be widened first), cuda(zero, stream) with any of the three types on CUDA.
template <class Cpu, class Cuda>
auto dispatch_with_half(const Tensor& on, Cpu&& cpu, Cuda&& cuda) -> decltype(cpu(float{})) {
  if (is_cpu_bf16(on)) return cpu(bfloat16{});
  return dispatch_with_cuda_half(on, std::forward<Cpu>(cpu), std::forward<Cuda>(cuda));
}

template <class Cpu, class Cuda>
auto dispatch_device(Device device, Cpu&& cpu, [[maybe_unused]] Cuda&& cuda) -> decltype(cpu()) {
  if (device.is_cuda()) {
#if EMBER_WITH_CUDA
    CudaScope scope(device);
    return cuda(scope.stream());
#else
    throw_built_without_cuda();
#endif
  }
  return cpu();
}

template <class Cpu, class Cuda>
auto dispatch_device(const Tensor& on, Cpu&& cpu, Cuda&& cuda) -> decltype(cpu()) {
  return dispatch_device(on.device(), std::forward<Cpu>(cpu), std::forward<Cuda>(cuda));
}

template <class Cpu, class Cuda>
auto dispatch_dtype(const Tensor& on, Cpu&& cpu, [[maybe_unused]] Cuda&& cuda) -> decltype(cpu(float{})) {
  if (on.is_cuda()) {
#if EMBER_WITH_CUDA
    CudaScope scope(on.device());
    return visit_dtype(on.dtype(), [&](auto zero) { return cuda(zero, scope.stream()); });
#else
    throw_built_without_cuda();
#endif
  }
  return visit_dtype(on.dtype(), cpu);
}

}  // namespace ember::ext
