// Storage: the one buffer behind tensors, in exactly one place — pageable host memory, pinned
// host memory or device memory — and the allocation statistics of each place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/device.h"

typedef struct CUstream_st* cudaStream_t;

namespace ember {

namespace cuda {
class Event;
}

enum class MemoryKind : std::uint8_t { pageable, pinned, device };
const char* memory_kind_name(MemoryKind kind);

struct MemoryStats {
  std::size_t bytes_in_use = 0;       // held by live storages
  std::size_t peak_bytes_in_use = 0;  // since start or the last reset_peak_memory_stats
  std::size_t allocations = 0;        // storages allocated (zero-byte ones are not counted)
  std::size_t frees = 0;
  std::size_t reserved_bytes = 0;       // memory held from the system, cached free blocks included
  std::size_t peak_reserved_bytes = 0;  // device only
  // Host: blocks obtained from the system allocator (a steady-state training step adds none: its
  // tensors reuse blocks freed by the step before). Device: the pool's own growth is in
  // reserved_bytes.
  std::size_t system_allocations = 0;
  std::size_t cached_bytes = 0;  // host: freed blocks kept for reuse
};

// Statistics of one place: Device::cpu() is pageable host memory, cuda:N that device's pool.
MemoryStats memory_stats(Device device);
MemoryStats pinned_memory_stats();
void reset_peak_memory_stats(Device device);

namespace cuda {
// Returns the pool's cached free memory to the driver (waits for the device first).
void empty_cache(Device device);
}  // namespace cuda
// Returns the host cache's free blocks to the system.
void empty_host_cache();
// False in AddressSanitizer builds, where every block goes back to the system at once so that a
// use after free is caught.
bool host_cache_enabled();

// Move-only owner of one allocation. Tensors share a Storage through a shared_ptr.
class Storage {
 public:
  // Allocates `bytes` (zero is allowed) of `kind` memory on `device` (kind must be device for a
  // CUDA device, pageable or pinned for the CPU). Pinned memory asked for where no CUDA device is
  // usable falls back to pageable memory with a one-time warning on stderr, as PyTorch does.
  // Device memory comes from the device's stream-ordered pool, on the current stream.
  // Throws OutOfMemoryError when the device is full, reporting the bytes asked for, in use and
  // peak, and what to try.
  Storage(std::size_t bytes, Device device, MemoryKind kind);
  // A view of memory someone else owns (a data loader's staging buffer): nothing is allocated or
  // freed; `on_release` runs when the last tensor using it lets go, so the owner knows the memory
  // may be reused. `keep_alive` is held until then (the owner of the memory, typically).
  static std::shared_ptr<Storage> borrow(void* data, std::size_t bytes, Device device, MemoryKind kind,
                                         std::shared_ptr<const void> keep_alive, std::function<void()> on_release);
  ~Storage();
  Storage(Storage&& other) noexcept;
  Storage& operator=(Storage&& other) noexcept;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemoryKind kind() const { return kind_; }
  bool is_pinned() const { return kind_ == MemoryKind::pinned; }

  // A device→host copy into this storage that has been issued but may not have finished: host
  // reads through Tensor wait for `event` first, so a non_blocking copy is never read early.
  void set_ready_event(std::shared_ptr<cuda::Event> event) { ready_ = std::move(event); }
  void wait_until_ready() const;

 private:
  void release() noexcept;

  Storage() = default;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool borrowed_ = false;
  std::shared_ptr<const void> keep_alive_;
  std::function<void()> on_release_;
  Device device_;
  MemoryKind kind_ = MemoryKind::pageable;
  cudaStream_t stream_ = nullptr;               // device memory is freed in order on the stream it came from
  mutable std::shared_ptr<cuda::Event> ready_;  // cleared once waited for
};

}  // namespace ember
