// Dropout from a counter-based random stream: element i of a call keeps its value when
// u(seed, offset + i) ≥ p, with u a hash of its arguments mapped to [0, 1). The CPU and the GPU
// compute the same u, so one seed drops the same elements on every device, and no random state
// moves between host and device.
// Forward: y = keep ? x/(1 − p) : 0 and mask = keep (1 byte per element). Backward:
// dx = mask ? dy/(1 − p) : 0. CPU: float, double and bf16; CUDA: float, bf16 and f16 (16-bit data
// computed in f32 and rounded once: the bits of the f32 kernel on a widened copy).
#pragma once

#include "base/counter_random.h"
#include "kernels/common.h"

namespace ember::kernels {

using ember::counter_uniform;  // base/counter_random.h

// The per-element formulas, shared by both twins (Note [one formula per op] in elementwise_math.h).
EMBER_HOST_DEVICE bool dropout_keeps(std::uint64_t seed, std::uint64_t counter, float p) {
  return counter_uniform(seed, counter) >= p;
}
// 1/(1 − p) in double, rounded once to the element type; 0 when everything is dropped.
template <class T>
EMBER_HOST_DEVICE T dropout_scale(float p) {
  return p < 1.0f ? static_cast<T>(1.0 / (1.0 - static_cast<double>(p))) : T(0);
}
template <class T>
EMBER_HOST_DEVICE T dropout_apply(bool keep, T x, T scale) {
  return keep ? x * scale : T(0);
}

}  // namespace ember::kernels

namespace ember::kernels::cpu {
template <class T>
void dropout_forward(const T* x, T* y, std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed,
                     std::uint64_t offset);
template <class T>
void dropout_backward(const T* dy, const std::uint8_t* mask, T* dx, std::size_t n, float p);
}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {
template <class T>
void dropout_forward(const T* x, T* y, std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed,
                     std::uint64_t offset, cudaStream_t stream);
template <class T>
void dropout_backward(const T* dy, const std::uint8_t* mask, T* dx, std::size_t n, float p, cudaStream_t stream);
}  // namespace ember::kernels::cuda
