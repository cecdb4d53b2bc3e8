// Pinned and device memory for Storage: the CUDA calls behind it.
#include "core/cuda/memory.h"

#include <array>
#include <cstdint>
#include <mutex>

#include "base/config.h"
#include "base/error.h"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ember::cuda::memory {

#if EMBER_WITH_CUDA
namespace {

constexpr int kMaxDevices = 64;

cudaMemPool_t device_pool(Device device) {
  static std::array<std::once_flag, kMaxDevices> configured;
  cudaMemPool_t pool = nullptr;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device.index));
  std::call_once(configured[static_cast<std::size_t>(device.index)], [&] {
    // Keep freed memory in the pool instead of returning it at every synchronization: steady
    // state training then never reaches the driver's allocator.
    std::uint64_t threshold = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  });
  return pool;
}

std::size_t pool_attribute(Device device, cudaMemPoolAttr attribute) {
  std::uint64_t value = 0;
  CUDA_CHECK(cudaMemPoolGetAttribute(device_pool(device), attribute, &value));
  return static_cast<std::size_t>(value);
}

std::string mib(std::size_t bytes) { return detail::concat(bytes / (1024.0 * 1024.0), " MiB"); }

}  // namespace

void* allocate_pinned(std::size_t bytes) {
  void* data = nullptr;
  CUDA_CHECK(cudaHostAlloc(&data, bytes, cudaHostAllocPortable));
  return data;
}

void free_pinned(void* data) noexcept { CUDA_CHECK_NOTHROW(cudaFreeHost(data)); }

void* allocate_device(Device device, std::size_t bytes, cudaStream_t stream) {
  device_pool(device);  // configures the pool on first use
  void* data = nullptr;
  const cudaError_t status = cudaMallocAsync(&data, bytes, stream);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    return nullptr;
  }
  CUDA_CHECK(status);
  return data;
}

void throw_out_of_memory(Device device, std::size_t bytes, std::size_t tensor_bytes, std::size_t peak_tensor_bytes) {
  std::size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  throw OutOfMemoryError(
      detail::concat("CUDA out of memory on ", device, ": tried to allocate ", mib(bytes), "; tensors hold ",
                     mib(tensor_bytes), " (peak ", mib(peak_tensor_bytes), "), the pool reserves ",
                     mib(pool_attribute(device, cudaMemPoolAttrReservedMemCurrent)), ", the device has ",
                     mib(free_bytes), " free of ", mib(total_bytes),
                     ". Try a smaller batch size, drop references to tensors you no longer need, or call "
                     "ember::cuda::empty_cache() to return cached blocks"));
}

void free_device(void* data, cudaStream_t stream) noexcept { CUDA_CHECK_NOTHROW(cudaFreeAsync(data, stream)); }

PoolBytes pool_bytes(Device device) {
  return {pool_attribute(device, cudaMemPoolAttrReservedMemCurrent),
          pool_attribute(device, cudaMemPoolAttrReservedMemHigh)};
}

void trim_pool(Device device) {
  DeviceGuard guard(device);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemPoolTrimTo(device_pool(device), 0));
}

#else  // Without CUDA no device is usable, so Storage never asks; these say so if anything does.

namespace {
[[noreturn]] void no_cuda() { throw DeviceError("CUDA memory needs the CUDA backend; ember was built without CUDA"); }
}  // namespace

void* allocate_pinned(std::size_t) { no_cuda(); }
void free_pinned(void*) noexcept {}
void* allocate_device(Device, std::size_t, cudaStream_t) { no_cuda(); }
void throw_out_of_memory(Device, std::size_t, std::size_t, std::size_t) { no_cuda(); }
void free_device(void*, cudaStream_t) noexcept {}
PoolBytes pool_bytes(Device) { return {}; }
void trim_pool(Device) {}

#endif

}  // namespace ember::cuda::memory
