// Allocation for the three kinds of memory, with statistics, and the Storage that owns one.
#include "core/tensor/storage.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "core/cuda/memory.h"
#include "core/cuda/runtime.h"

namespace ember {
namespace {

constexpr std::size_t kHostAlignment = 64;  // a cache line, and enough for any vector load
constexpr int kMaxDevices = 64;

// Lock-free counters: the data loader's threads allocate too.
struct Counters {
  std::atomic<std::size_t> in_use{0}, peak{0}, allocations{0}, frees{0};

  void on_allocate(std::size_t bytes) {
    const std::size_t now = in_use.fetch_add(bytes) + bytes;
    std::size_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    allocations.fetch_add(1);
  }
  void on_free(std::size_t bytes) {
    in_use.fetch_sub(bytes);
    frees.fetch_add(1);
  }
  MemoryStats snapshot() const {
    MemoryStats s;
    s.bytes_in_use = in_use.load();
    s.peak_bytes_in_use = peak.load();
    s.allocations = allocations.load();
    s.frees = frees.load();
    return s;
  }
};

Counters g_pageable, g_pinned;
std::array<Counters, kMaxDevices> g_device;

Counters& counters(Device device, MemoryKind kind) {
  if (kind == MemoryKind::pinned) return g_pinned;
  if (device.is_cpu()) return g_pageable;
  return g_device[static_cast<std::size_t>(device.index)];
}

// Host memory goes through a cache of freed blocks, by size class, so that a training step's
// tensors reuse the blocks the previous step freed instead of calling the system allocator.
// Size classes: multiples of 64 bytes up to 4 KiB, then four classes per power of two (at most
// 25% waste), so a smaller last batch still finds a block. Pinned memory has a cache of its own:
// cudaHostAlloc and cudaFreeHost cost far more than malloc, and both synchronize the device, so a
// non_blocking copy to the host into fresh pinned memory every step would stall the GPU. A pinned
// block comes back only after the copies out of it have finished (Storage::release), and a copy
// into it completes before anything reads it (its ready event), so a reused block is never in use.
struct PageableMemory {
  static void* allocate(std::size_t bytes) { return std::aligned_alloc(kHostAlignment, bytes); }
  static void release(void* p) { std::free(p); }
};
struct PinnedMemory {
  static void* allocate(std::size_t bytes) { return cuda::memory::allocate_pinned(bytes); }
  static void release(void* p) { cuda::memory::free_pinned(p); }
};

template <class Memory>
class HostCache {
 public:
  static std::size_t size_class(std::size_t bytes) {
    if (bytes <= 4096) return (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    std::size_t octave = 4096;
    while (octave * 2 < bytes) octave *= 2;
    const std::size_t step = octave / 4;
    return (bytes + step - 1) / step * step;
  }

  void* take(std::size_t size) {
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        return p;
      }
    }
    void* p = Memory::allocate(size);
    if (!p) {
      release_all();  // cached blocks may be what stands in the way
      p = Memory::allocate(size);
    }
    if (!p) throw Error(detail::concat("out of host memory allocating ", size, " bytes"));
    system_allocations_.fetch_add(1);
    reserved_.fetch_add(size);
    return p;
  }

  void give_back(void* p, std::size_t size) {
    std::lock_guard lock(mutex_);
    if (!kCaching || cached_ + size > kMaxCachedBytes) {
      Memory::release(p);
      reserved_.fetch_sub(size);
      return;
    }
    free_[size].push_back(p);
    cached_ += size;
  }

  void release_all() {
    std::lock_guard lock(mutex_);
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) Memory::release(p);
      reserved_.fetch_sub(size * blocks.size());
      blocks.clear();
    }
    cached_ = 0;
  }

  static bool caching() { return kCaching; }
  void add_to(MemoryStats& s) const {
    std::lock_guard lock(mutex_);
    s.system_allocations = system_allocations_.load();
    s.reserved_bytes = reserved_.load();
    s.cached_bytes = cached_;
  }

 private:
  static constexpr std::size_t kMaxCachedBytes = std::size_t{1} << 30;  // beyond this, frees go to the system
#if defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer every block goes back to the system, so a use after free is caught.
  static constexpr bool kCaching = false;
#else
  static constexpr bool kCaching = true;
#endif
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
  std::atomic<std::size_t> system_allocations_{0}, reserved_{0};
};

// Never destroyed: tensors with static storage duration may free into them during exit.
HostCache<PageableMemory>& host_cache() {
  static auto* cache = new HostCache<PageableMemory>();
  return *cache;
}
HostCache<PinnedMemory>& pinned_cache() {
  static auto* cache = new HostCache<PinnedMemory>();
  return *cache;
}

}  // namespace

MemoryStats memory_stats(Device device) {
  if (device.is_cpu()) {
    MemoryStats s = g_pageable.snapshot();
    host_cache().add_to(s);
    return s;
  }
  require_usable(device);
  MemoryStats s = g_device[static_cast<std::size_t>(device.index)].snapshot();
  const cuda::memory::PoolBytes pool = cuda::memory::pool_bytes(device);
  s.reserved_bytes = pool.reserved;
  s.peak_reserved_bytes = pool.peak_reserved;
  return s;
}

MemoryStats pinned_memory_stats() {
  MemoryStats s = g_pinned.snapshot();
  pinned_cache().add_to(s);
  return s;
}

void reset_peak_memory_stats(Device device) {
  Counters& c = counters(device, device.is_cpu() ? MemoryKind::pageable : MemoryKind::device);
  c.peak.store(c.in_use.load());
}

void empty_host_cache() {
  host_cache().release_all();
  pinned_cache().release_all();
}
bool host_cache_enabled() { return HostCache<PageableMemory>::caching(); }

namespace cuda {
void empty_cache(Device device) {
  require_usable(device);
  memory::trim_pool(device);
}
}  // namespace cuda

Storage::Storage(std::size_t bytes, Device device, MemoryKind kind) : bytes_(bytes), device_(device), kind_(kind) {
  if (device.is_cuda() && kind != MemoryKind::device)
    throw ValueError(detail::concat("storage on ", device, " must be device memory, not ", memory_kind_name(kind)));
  if (device.is_cpu() && kind == MemoryKind::device)
    throw ValueError("device memory must belong to a CUDA device, not the cpu");
  require_usable(device);
  if (kind_ == MemoryKind::pinned && !cuda::is_available()) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      std::fprintf(stderr,
                   "ember: warning: pinned memory requested but no CUDA device is usable (%s); using pageable "
                   "memory\n",
                   cuda::unavailable_reason().c_str());
    });
    kind_ = MemoryKind::pageable;
  }
  if (bytes_ == 0) return;
  switch (kind_) {
    case MemoryKind::pageable:
      data_ = host_cache().take(HostCache<PageableMemory>::size_class(bytes_));
      break;
    case MemoryKind::pinned:
      data_ = pinned_cache().take(HostCache<PinnedMemory>::size_class(bytes_));
      break;
    case MemoryKind::device: {
      stream_ = cuda::compute_stream(device_);
      data_ = cuda::memory::allocate_device(device_, bytes_, stream_);
      if (data_ == nullptr) {
        const MemoryStats held = memory_stats(device_);
        cuda::memory::throw_out_of_memory(device_, bytes_, held.bytes_in_use, held.peak_bytes_in_use);
      }
      // Made for work on another stream: that stream starts after the allocation, and the free
      // will wait for it (Note [stream ownership of device memory]).
      if (const cudaStream_t current = cuda::current_stream(device_); current != stream_) {
        try {
          cuda::order_after(current, stream_, device_);
          record_stream(current);
        } catch (...) {
          cuda::memory::free_device(data_, stream_);
          throw;
        }
      }
      break;
    }
  }
  counters(device_, kind_).on_allocate(bytes_);
}

std::shared_ptr<Storage> Storage::borrow(void* data, std::size_t bytes, Device device, MemoryKind kind,
                                         std::shared_ptr<const void> keep_alive, std::function<void()> on_release) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = device;
  s->kind_ = kind;
  s->borrowed_ = true;
  s->keep_alive_ = std::move(keep_alive);
  s->on_release_ = std::move(on_release);
  return s;
}

void Storage::record_stream(cudaStream_t stream, std::optional<Device> stream_device) {
  if (kind_ != MemoryKind::device || borrowed_ || stream == stream_) return;
  const std::uint64_t generation = cuda::stream_generation(stream);
  for (StreamUse& use : used_on_)
    if (use.stream == stream && use.generation == generation) {
      use.done = nullptr;  // all of the stream's work, from now on
      return;
    }
  used_on_.push_back({stream, stream_device.value_or(device_), generation, nullptr});
}

void Storage::record_use(cudaStream_t stream, std::shared_ptr<cuda::Event> done) {
  if (kind_ != MemoryKind::device || borrowed_ || stream == stream_) return;
  const std::uint64_t generation = cuda::stream_generation(stream);
  for (StreamUse& use : used_on_)
    if (use.stream == stream && use.generation == generation) {
      if (use.done) use.done = std::move(done);  // later on the same stream: covers the earlier use
      return;
    }
  used_on_.push_back({stream, device_, generation, std::move(done)});
}

void Storage::record_pending_read(std::shared_ptr<cuda::Event> event) {
  // Completed reads need not be kept: the list stays as short as the copies in flight.
  std::erase_if(pending_reads_, [](const std::shared_ptr<cuda::Event>& e) { return e->query(); });
  pending_reads_.push_back(std::move(event));
}

void Storage::wait_for_pending_reads() noexcept {
  for (const std::shared_ptr<cuda::Event>& e : pending_reads_) {
    try {
      e->synchronize();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "ember: warning: waiting for a copy out of pinned memory failed: %s\n", error.what());
    }
  }
  pending_reads_.clear();
}

void Storage::release() noexcept {
  wait_for_pending_reads();  // a staging slot or pinned buffer is not reused while a copy reads it
  if (borrowed_) {
    if (on_release_) {
      try {
        on_release_();
      } catch (...) {
        std::fprintf(stderr, "ember: warning: a borrowed storage's release hook threw; ignored\n");
      }
    }
    on_release_ = nullptr;
    keep_alive_.reset();
    data_ = nullptr;
    return;
  }
  if (!data_) return;
  switch (kind_) {
    case MemoryKind::pageable:
      host_cache().give_back(data_, HostCache<PageableMemory>::size_class(bytes_));
      break;
    case MemoryKind::pinned:
      try {
        wait_until_ready();  // a copy into the block must land before the block is handed out again
      } catch (const std::exception& error) {
        std::fprintf(stderr, "ember: warning: waiting for a copy into pinned memory failed: %s\n", error.what());
      }
      pinned_cache().give_back(data_, HostCache<PinnedMemory>::size_class(bytes_));
      break;
    case MemoryKind::device:
      // The free waits for every other stream that still uses the memory.
      for (const StreamUse& use : used_on_) {
        try {
          if (use.done)
            use.done->wait(stream_);  // an event outlives its stream
          else
            cuda::order_after_if_alive(stream_, use.stream, use.device, use.generation);
        } catch (const std::exception& error) {
          std::fprintf(stderr, "ember: warning: ordering a free after stream work failed: %s\n", error.what());
        }
      }
      used_on_.clear();
      cuda::memory::free_device(data_, stream_);
      break;
  }
  counters(device_, kind_).on_free(bytes_);
  data_ = nullptr;
}

Storage::~Storage() { release(); }

Storage::Storage(Storage&& other) noexcept
    : data_(other.data_),
      bytes_(other.bytes_),
      borrowed_(other.borrowed_),
      keep_alive_(std::move(other.keep_alive_)),
      on_release_(std::move(other.on_release_)),
      device_(other.device_),
      kind_(other.kind_),
      stream_(other.stream_),
      ready_(std::move(other.ready_)),
      used_on_(std::move(other.used_on_)),
      pending_reads_(std::move(other.pending_reads_)) {
  other.data_ = nullptr;
  other.bytes_ = 0;
  other.borrowed_ = false;
}

Storage& Storage::operator=(Storage&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    borrowed_ = other.borrowed_;
    keep_alive_ = std::move(other.keep_alive_);
    on_release_ = std::move(other.on_release_);
    other.borrowed_ = false;
    device_ = other.device_;
    kind_ = other.kind_;
    stream_ = other.stream_;
    ready_ = std::move(other.ready_);
    used_on_ = std::move(other.used_on_);
    pending_reads_ = std::move(other.pending_reads_);
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Storage::wait_until_ready() const {
  if (!ready_) return;
  ready_->synchronize();
  ready_.reset();
}

}  // namespace ember
