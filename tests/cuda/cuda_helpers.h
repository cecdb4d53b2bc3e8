// Helpers of the GPU tests: device buffers filled from host vectors, read back, NaN poisoning.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/tensor/tensor.h"
#include "kernels/elementwise.h"
#include "support/helpers.h"

namespace ember::testing {

inline const Device kGpu = Device::cuda(0);

inline cudaStream_t gpu_stream() { return cuda::current_stream(kGpu); }

// Whether the GPU is ember's software GPU (sim/), which names itself so.
inline bool running_on_software_gpu() {
  cudaDeviceProp properties{};
  return cudaGetDeviceProperties(&properties, 0) == cudaSuccess &&
         std::string(properties.name).find("software GPU") != std::string::npos;
}

// A device copy of `values`, preceded by `offset` unused elements so that raw<T>() + offset is a
// deliberately misaligned pointer when offset is odd.
template <class T>
Tensor device_copy(const std::vector<T>& values, std::size_t offset = 0) {
  std::vector<T> padded(offset + values.size(), T{});
  for (std::size_t i = 0; i < values.size(); ++i) padded[offset + i] = values[i];
  return from_vector<T>(padded, {static_cast<std::int64_t>(padded.size())}).to(kGpu);
}

// A device buffer of n + offset elements, all NaN (or the type's maximum for integers), so an
// element a kernel fails to write is caught.
template <class T>
Tensor poisoned(std::size_t n, std::size_t offset = 0) {
  std::vector<T> values(n + offset, std::numeric_limits<T>::has_quiet_NaN ? std::numeric_limits<T>::quiet_NaN()
                                                                          : std::numeric_limits<T>::max());
  return from_vector<T>(values, {static_cast<std::int64_t>(values.size())}).to(kGpu);
}

template <class T>
std::vector<T> read_back(const Tensor& t, std::size_t offset = 0) {
  std::vector<T> all = t.to_vector<T>();
  return std::vector<T>(all.begin() + static_cast<std::ptrdiff_t>(offset), all.end());
}

// The sizes every kernel is checked at: empty, one, odd, not a multiple of the block size, more
// blocks than one wave, and over four million elements. EMBER_TEST_SIZES=small keeps the small
// ones, for runs under compute-sanitizer, which slows kernels a hundredfold; =medium stops below
// the largest, for the software GPU (sim/), which runs a few million simulated threads a second.
inline const std::vector<std::size_t>& test_sizes() {
  static const std::vector<std::size_t> sizes = [] {
    const char* choice = std::getenv("EMBER_TEST_SIZES");
    if (choice && std::string(choice) == "small") return std::vector<std::size_t>{0, 1, 31, 1000};
    if (choice && std::string(choice) == "medium") return std::vector<std::size_t>{0, 1, 31, 1000, 65537};
    return std::vector<std::size_t>{0, 1, 31, 1000, 65537, 4194319};
  }();
  return sizes;
}

// Whether EMBER_TEST_SIZES asks for the short runs (small or medium: under compute-sanitizer or
// on the software GPU), which keep the models of the whole-step tests small too.
inline bool small_test_sizes() { return test_sizes().size() < 6; }

// Whether a test shape of `elements` elements is left out of the short runs (its smaller shapes
// still cover several blocks; the large ones cost minutes under compute-sanitizer or on the
// software GPU with ThreadSanitizer).
inline bool too_large_for_short_runs(std::size_t elements) { return small_test_sizes() && elements > 100000; }

// The broadcast [rows, 1, cols] ∘ [k, 1] → [rows, k, cols] (a in rows of cols, b one value per k).
inline kernels::BroadcastLayout rows_k_cols_layout(long long rows, long long k, long long cols) {
  kernels::BroadcastLayout layout;
  layout.ndim = 3;
  const long long shape[3] = {rows, k, cols}, sa[3] = {cols, 0, 1}, sb[3] = {0, 1, 0};
  for (int d = 0; d < 3; ++d) {
    layout.out_shape[d] = shape[d];
    layout.a_stride[d] = sa[d];
    layout.b_stride[d] = sb[d];
  }
  return layout;
}

}  // namespace ember::testing
