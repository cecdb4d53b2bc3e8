// The CUDA memory behind Storage (core/tensor/storage.h): pinned host memory and device memory
// from each device's stream-ordered pool. The only file where storage's CUDA calls are made, so
// its `#if EMBER_WITH_CUDA` lives here; in a build without CUDA these are never reached (no CUDA
// device is ever usable) and throw if they are.
#pragma once

#include <cstddef>

#include "core/cuda/runtime.h"

namespace ember::cuda::memory {

void* allocate_pinned(std::size_t bytes);
void free_pinned(void* data) noexcept;

// From the device's pool, on `stream` (its compute stream): freed memory stays cached in the pool
// (release threshold "never"). nullptr when the pool cannot grow: the caller, which knows what its
// tensors hold, then calls throw_out_of_memory.
void* allocate_device(Device device, std::size_t bytes, cudaStream_t stream);
// Throws OutOfMemoryError for `bytes` on `device`: what tensors hold (now and at the peak), what
// the pool reserves and the device has free, and what to try.
[[noreturn]] void throw_out_of_memory(Device device, std::size_t bytes, std::size_t tensor_bytes,
                                      std::size_t peak_tensor_bytes);
void free_device(void* data, cudaStream_t stream) noexcept;  // stream-ordered

struct PoolBytes {
  std::size_t reserved = 0, peak_reserved = 0;
};
PoolBytes pool_bytes(Device device);
void trim_pool(Device device);  // synchronizes the device, then returns every cached block

}  // namespace ember::cuda::memory
