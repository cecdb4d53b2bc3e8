// The tests' launch: the kernel, launched as CUDA would, with the error CUDA would report
// (cudaGetLastError) returned instead of thrown — these tests are about the errors themselves.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

template <auto Kernel, class... Args>
cudaError_t launch_raw(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, const Args&... args) {
#if defined(__CUDACC__)
  Kernel<<<grid, block, shared_bytes, stream>>>(args...);
#else
  cuda_host_launch<Kernel>(grid, block, shared_bytes, stream, args...);
#endif
  return cudaGetLastError();
}

// Device memory for n values of T, freed at scope exit.
template <class T>
struct DeviceBuffer {
  T* data = nullptr;
  explicit DeviceBuffer(std::size_t n) { cudaMalloc(reinterpret_cast<void**>(&data), n * sizeof(T)); }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};
