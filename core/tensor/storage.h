// Storage: the one buffer behind tensors, in exactly one place — pageable host memory, pinned
// host memory or device memory — and the allocation statistics of each place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/tensor/device.h"

typedef struct CUstream_st* cudaStream_t;

namespace ember {

namespace cuda {
class Event;
}

struct MemoryStats {
  std::size_t bytes_in_use = 0;       // held by live storages
  std::size_t peak_bytes_in_use = 0;  // since start or the last reset_peak_memory_stats
  std::size_t allocations = 0;        // storages allocated (zero-byte ones are not counted)
  std::size_t frees = 0;
  std::size_t reserved_bytes = 0;       // memory held from the system, cached free blocks included
  std::size_t peak_reserved_bytes = 0;  // device only
  // Host, pageable or pinned: blocks obtained from the system allocator or cudaHostAlloc (a
  // steady-state training step adds none: its tensors reuse blocks freed by the step before).
  // Device: the pool's own growth is in reserved_bytes.
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
// Returns the host caches' free blocks (pageable and pinned) to the system.
void empty_host_cache();
// False in AddressSanitizer builds, where every block goes back to the system at once so that a
// use after free is caught.
bool host_cache_enabled();

// Note [stream ownership of device memory]
// Device memory is allocated and freed on its device's compute stream, which lives as long as the
// process — never on a stream that may be destroyed before the memory is freed. A storage made
// while another stream is current (a cuda::StreamGuard) is ordered before that stream's work by an
// event and records the stream: its free waits for all the work issued to that stream by then, as
// PyTorch's record_stream does; code that runs ops on a side stream over tensors made elsewhere
// calls Tensor::record_stream for the same. A copy on a side stream records just itself (an event
// after it), so that freeing one batch's buffer never waits for the next batch's copy queued
// behind it. A recorded stream that has been destroyed is skipped: a cuda::Stream finishes its
// work in its destructor. So the pool never hands a block to a new allocation while another stream
// still uses it. Library workspaces allocated and freed on the stream that uses them, around one
// call (cuDNN's), are stream-ordered by construction and need none of this.
// Pinned host memory has the converse rule: an asynchronous copy out of it is recorded
// (record_pending_read), and the memory goes back — freed, or returned to its owner (a data
// loader's staging slot) — only after that copy has finished.
// During a CUDA graph capture of a device's compute stream no other thread may allocate or free
// memory of that device: its stream-ordered calls would join the capture (Note [graph-safe
// kernels] in core/cuda/graph.h).

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

  // Device memory (Note [stream ownership of device memory]); the compute stream it belongs to
  // needs no record. record_stream: `stream` (a stream of `stream_device`, by default the memory's
  // own device) uses it until further notice, so the free waits for all the work that stream has
  // by then. record_use: a use on `stream` that ends with `done`, which the free waits for.
  void record_stream(cudaStream_t stream, std::optional<Device> stream_device = std::nullopt);
  void record_use(cudaStream_t stream, std::shared_ptr<cuda::Event> done);
  // Whether `stream` is the one this memory is allocated and freed on (work there needs no record).
  bool belongs_to(cudaStream_t stream) const { return stream == stream_; }
  // Pinned memory: an asynchronous copy out of it ends with `event`; it is not freed or given back
  // to its owner before then.
  void record_pending_read(std::shared_ptr<cuda::Event> event);

 private:
  void release() noexcept;
  void wait_for_pending_reads() noexcept;

  Storage() = default;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool borrowed_ = false;
  std::shared_ptr<const void> keep_alive_;
  std::function<void()> on_release_;
  Device device_;
  MemoryKind kind_ = MemoryKind::pageable;
  cudaStream_t stream_ = nullptr;               // device memory: its device's compute stream
  mutable std::shared_ptr<cuda::Event> ready_;  // cleared once waited for
  struct StreamUse {
    cudaStream_t stream;
    Device device;
    std::uint64_t generation;           // cuda::stream_generation when recorded
    std::shared_ptr<cuda::Event> done;  // null: all the stream's work at the free (record_stream)
  };
  std::vector<StreamUse> used_on_;                           // other streams using device memory
  std::vector<std::shared_ptr<cuda::Event>> pending_reads_;  // copies out of pinned memory
};

}  // namespace ember
