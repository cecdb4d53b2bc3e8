// Device and pinned host memory: allocation, the stream-ordered pool with its quarantine and cache
// trimming, and the memory API (cudaMalloc*, cudaFree*, cudaHost*, cudaMemGetInfo, cudaMemPool*).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "executor.h"
#include "state.h"

namespace ember_sim::rt {

// ---- allocation ----------------------------------------------------------------------------------
// The allocation holding address p; with `or_end`, also the one p is one past the end of (a kernel
// may be passed the end of a range it does not read).
Memory* find_memory(Runtime& rt, const void* p, bool or_end) {
  const char* c = static_cast<const char*>(p);
  auto it = rt.memory.upper_bound(c);
  if (it == rt.memory.begin()) return nullptr;
  Memory* m = std::prev(it)->second;
  if (c < m->base + m->size || (or_end && c == m->base + m->size)) return m;
  return nullptr;
}

std::string bytes_text(std::size_t n) { return std::to_string(n) + " bytes"; }

Memory* new_memory(Runtime& rt, std::size_t size, int device, std::string origin) {
  auto* m = new Memory;
  // Aligned as cudaMalloc's are, and exactly as large as asked for: AddressSanitizer then reports
  // an access one past the end.
  const std::size_t alignment = device >= 0 ? 256 : 4096;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, std::max<std::size_t>(size, 1)) != 0) {
    delete m;
    return nullptr;
  }
  m->base = static_cast<char*>(p);
  // Fresh memory holds NaNs, not zeros: a kernel that reads what nobody wrote shows it.
  std::memset(m->base, kPoison, size);
  m->size = size;
  m->device = device;
  m->origin = std::move(origin);
  rt.memory[m->base] = m;
  return m;
}

void release_memory(Runtime& rt, Memory* m) {
  rt.memory.erase(m->base);
  std::free(m->base);
  delete m;
}

namespace {
// How many reissued blocks (and bytes) the quarantine keeps before it releases the oldest.
constexpr std::size_t kQuarantineBlocks = 4096;
constexpr std::size_t kQuarantineBytes = std::size_t{256} << 20;

void quarantine(Runtime& rt, Device& d, Memory* m) {
  d.quarantine.push_back(m);
  d.quarantined_bytes += m->size;
  while (d.quarantine.size() > kQuarantineBlocks || d.quarantined_bytes > kQuarantineBytes) {
    Memory* oldest = d.quarantine.front();
    if (oldest->free_op && !oldest->free_op->done) break;  // its free has not run: keep it a while longer
    d.quarantine.pop_front();
    d.quarantined_bytes -= oldest->size;
    release_memory(rt, oldest);
  }
}

// Returns cached pool blocks to the system, newest first, until at most `keep` bytes stay cached;
// a block whose cudaFreeAsync has not run yet stays (work before it may still use it).
void trim_cache(Runtime& rt, Device& d, std::size_t keep) {
  for (std::size_t i = d.pool_cache.size(); i-- > 0 && d.cached > keep;) {
    Memory* m = d.pool_cache[i];
    if (m->free_op && !m->free_op->done) continue;
    d.pool_cache.erase(d.pool_cache.begin() + static_cast<std::ptrdiff_t>(i));
    d.cached -= m->size;
    release_memory(rt, m);
  }
}

// Hands the new block `m` out: counted in use on `d` and, allocated on stream `s` (a capture records
// its node instead), a write in the stream's order as far as the other streams are concerned — a
// block handed out again included.
void hand_out(Runtime& rt, Device& d, Memory* m, Stream* s, const std::string& call) {
  d.in_use += m->size;
  d.peak = std::max(d.peak, d.in_use);
  if (s) {
    m->last_write = Memory::Use{s->id, s->tick + 1, call};
    enqueue(rt, s, call, {}, nullptr);
  }
}

cudaError_t allocate_device(Runtime& rt, std::unique_lock<std::mutex>& lock, void** ptr, std::size_t size, Stream* s,
                            const std::string& call) {
  Device& d = rt.devices[static_cast<std::size_t>(t_device)];
  if (!ptr) return record_error(cudaErrorInvalidValue);
  if (capturing(s)) {
    // A memory-allocation node: the memory is the graph's, for its replays only (graphs.cpp).
    if (d.in_use + d.cached + size > config().capacity) return record_error(cudaErrorMemoryAllocation);
    Memory* m = new_memory(rt, size, t_device, call + " of " + bytes_text(size) + " inside a graph capture");
    if (!m) return record_error(cudaErrorMemoryAllocation);
    m->pool = true;
    m->graph = s->capture->graph.get();
    s->capture->graph->owned_memory.push_back(m->base);
    hand_out(rt, d, m, nullptr, call);
    capture_node(rt, s, cudaGraphNodeTypeMemAlloc, call + " of " + bytes_text(size), {}, nullptr);
    *ptr = m->base;
    return cudaSuccess;
  }
  if (s) {  // stream-ordered: a block freed on the same stream may be handed out again
    for (std::size_t i = 0; i < d.pool_cache.size(); ++i) {
      Memory* old = d.pool_cache[i];
      if (old->size != size || old->freed_on != s) continue;
      // Reissued at a fresh address, the old one quarantined: a use through a dangling pointer to
      // the old block is reported even after many reissues (a GPU would hand out the same address
      // and the use would silently read the new owner's data).
      Memory* m =
          new_memory(rt, size, t_device, call + " of " + bytes_text(size) + " on stream " + std::to_string(s->id));
      if (!m) return record_error(cudaErrorMemoryAllocation);
      m->pool = true;
      d.pool_cache.erase(d.pool_cache.begin() + static_cast<std::ptrdiff_t>(i));
      quarantine(rt, d, old);
      d.cached -= size;
      hand_out(rt, d, m, s, call);
      *ptr = m->base;
      return cudaSuccess;
    }
  }
  if (d.in_use + d.cached + size > config().capacity) {
    trim_cache(rt, d, 0);
    if (d.in_use + d.cached + size > config().capacity && d.in_use + size <= config().capacity) {
      device_synchronize(rt, lock, d.index);  // blocks whose frees are still queued: let them run
      trim_cache(rt, d, 0);
    }
  }
  if (d.in_use + d.cached + size > config().capacity) return record_error(cudaErrorMemoryAllocation);
  Memory* m =
      new_memory(rt, size, t_device,
                 call + " of " + bytes_text(size) + (s ? " on stream " + std::to_string(s->id) : std::string()));
  if (!m) return record_error(cudaErrorMemoryAllocation);
  m->pool = s != nullptr;
  hand_out(rt, d, m, s, call);
  *ptr = m->base;
  return cudaSuccess;
}
}  // namespace

}  // namespace ember_sim::rt

// ---- the memory API --------------------------------------------------------------------------------
using namespace ember_sim::rt;
using ember_sim::fail;

cudaError_t cudaMalloc(void** ptr, size_t size) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  note_context_use(t_device);
  if (cudaError_t e = sticky_error(rt, t_device)) return record_error(e);
  if (cudaError_t e = unsafe_during_capture(rt, "cudaMalloc")) return record_error(e);
  return allocate_device(rt, lock, ptr, size, nullptr, "cudaMalloc");
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  if (cudaError_t e = unsafe_during_capture(rt, "cudaFree")) return record_error(e);
  Memory* m = find_memory(rt, ptr);
  if (!m || m->base != ptr || m->device < 0 || m->freed) return record_error(cudaErrorInvalidDevicePointer);
  device_synchronize(rt, lock, m->device);  // cudaFree waits for the device, as in CUDA
  Device& d = rt.devices[static_cast<std::size_t>(m->device)];
  d.in_use -= m->size;
  release_memory(rt, m);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  note_context_use(t_device);
  if (cudaError_t e = sticky_error(rt, t_device)) return record_error(e);
  Stream* s = nullptr;
  if (cudaError_t e = issuing_stream(rt, stream, &s)) return record_error(e);
  const int saved = t_device;
  t_device = s->device;
  const cudaError_t e = allocate_device(rt, lock, ptr, size, s, "cudaMallocAsync");
  t_device = saved;
  return e;
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (!ptr) return cudaSuccess;
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  Memory* m = find_memory(rt, ptr);
  if (!m || m->base != ptr || m->device < 0) return record_error(cudaErrorInvalidDevicePointer);
  if (m->freed) fail("cudaFreeAsync of " + describe(*m) + ", which was already freed");
  if (capturing(s)) {
    // A memory-free node, for memory the same capture allocated (it stays the graph's). Freeing
    // other memory inside a capture is refused: the software GPU does not model it.
    if (m->graph != s->capture->graph.get())
      return record_error(conflicts_with_capture(rt, s, cudaErrorStreamCaptureUnsupported,
                                                 "cudaFreeAsync of memory allocated outside the capture"));
    capture_node(rt, s, cudaGraphNodeTypeMemFree, "cudaFreeAsync", {}, nullptr);
    return cudaSuccess;
  }
  if (cudaError_t e = legacy_conflict(rt, s)) return record_error(e);
  // The free writes the block, in the stream's order: a use by another stream not ordered before
  // it is a race, and a use enqueued after it a use after free.
  // The free poisons the block when the stream reaches it (work before it may still use the
  // contents); memory not from the pool goes back to the system then too.
  char* const base = m->base;
  const std::size_t size = m->size;
  const bool pool = m->pool;
  m->free_op = enqueue(rt, s, "cudaFreeAsync", {{m->base, 0, true, "the freed block"}}, [base, size, pool, m] {
    std::memset(base, kPoison, size);
    if (!pool) {
      Runtime& r = runtime();
      std::lock_guard<std::mutex> l(r.mutex);
      release_memory(r, m);
    }
  });
  m->freed = true;
  m->freed_on = s;
  Device& d = rt.devices[static_cast<std::size_t>(m->device)];
  d.in_use -= m->size;
  if (pool) {
    d.pool_cache.push_back(m);
    d.cached += m->size;
    if (d.release_threshold < d.cached && d.release_threshold != UINT64_MAX) trim_cache(rt, d, d.release_threshold);
  }
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) {
  if (!ptr) return cudaErrorInvalidValue;
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (cudaError_t e = unsafe_during_capture(rt, "cudaHostAlloc")) return record_error(e);
  note_context_use(t_device);
  Memory* m = new_memory(rt, size, -1, "pinned host buffer of " + bytes_text(size));
  if (!m) return record_error(cudaErrorMemoryAllocation);
  // Poisoned as device memory is (new_memory): CUDA leaves pinned memory undefined, so a read
  // before the first write shows NaN, not zeros.
  *ptr = m->base;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  if (cudaError_t e = unsafe_during_capture(rt, "cudaFreeHost")) return record_error(e);
  Memory* m = find_memory(rt, ptr);
  if (!m || m->base != ptr || m->device >= 0) return record_error(cudaErrorInvalidValue);
  for (std::size_t d = 0; d < rt.devices.size(); ++d) device_synchronize(rt, lock, static_cast<int>(d));
  release_memory(rt, m);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned int) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const Memory* m = find_memory(rt, host_ptr);
  if (!device_ptr || !m || m->device >= 0) return record_error(cudaErrorInvalidValue);
  *device_ptr = host_ptr;  // one address space, as with unified addressing
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const Device& d = rt.devices[static_cast<std::size_t>(t_device)];
  if (free_bytes) *free_bytes = config().capacity - d.in_use - d.cached;
  if (total) *total = config().capacity;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  Runtime& rt = runtime();
  if (!pool) return cudaErrorInvalidValue;
  if (device < 0 || device >= static_cast<int>(rt.devices.size())) return record_error(cudaErrorInvalidDevice);
  *pool = reinterpret_cast<cudaMemPool_t>(&rt.devices[static_cast<std::size_t>(device)].pool_handle);
  return cudaSuccess;
}

namespace {
Device* pool_device(Runtime& rt, cudaMemPool_t pool) {
  for (Device& d : rt.devices)
    if (reinterpret_cast<cudaMemPool_t>(&d.pool_handle) == pool) return &d;
  return nullptr;
}
}  // namespace

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Device* d = pool_device(rt, pool);
  if (!d || !value) return record_error(cudaErrorInvalidValue);
  if (attr == cudaMemPoolAttrReleaseThreshold)
    d->release_threshold = *static_cast<std::uint64_t*>(value);
  else if (attr == cudaMemPoolAttrReservedMemHigh || attr == cudaMemPoolAttrUsedMemHigh)
    d->peak = d->in_use;
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Device* d = pool_device(rt, pool);
  if (!d || !value) return record_error(cudaErrorInvalidValue);
  auto* out = static_cast<std::uint64_t*>(value);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold:
      *out = d->release_threshold;
      break;
    case cudaMemPoolAttrReservedMemCurrent:
      *out = d->in_use + d->cached;
      break;
    case cudaMemPoolAttrReservedMemHigh:
      *out = d->peak + d->cached;
      break;
    case cudaMemPoolAttrUsedMemCurrent:
      *out = d->in_use;
      break;
    case cudaMemPoolAttrUsedMemHigh:
      *out = d->peak;
      break;
    default:
      return record_error(cudaErrorNotSupported);
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Device* d = pool_device(rt, pool);
  if (!d) return record_error(cudaErrorInvalidValue);
  trim_cache(rt, *d, keep);
  return cudaSuccess;
}
