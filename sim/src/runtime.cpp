// The CUDA runtime API of the software GPU: devices, memory, streams, events, copies, launches.
//
// Asynchronous like the real one. Each stream has its own worker thread that runs the stream's
// operations in order — copies read their source when the stream reaches them, kernels run on
// the executor. And stricter than the real one in when work runs: an operation waits until the
// host needs it (a synchronization, a query, an event another stream waits for), so work the
// host forgot to wait for has not happened yet, every time, instead of usually. EMBER_SIM_EAGER=1
// starts work as soon as it is enqueued instead.
//
// Every operation carries a vector clock: its stream's operations before it, the streams it waited
// for through events, and what the host had synchronized with when it was enqueued. Memory keeps
// the last write and the reads since, with their clocks; an operation that touches memory another
// stream used, without being ordered after that use, is a missing synchronization and is reported
// naming both operations and the memory — whether or not the timing happened to hide it.
#include "runtime.h"
#include "state.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>

#include "ember_sim/device.h"
#include "executor.h"
#include "races.h"

namespace ember_sim::rt {

// ---- configuration (the simulator's own environment variables) -----------------------------------
long env_number(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return std::strtol(v, nullptr, 10);
}

Config::Config() {
  const char* v = std::getenv("EMBER_SIM_SEED");
  seed = v && *v ? static_cast<std::uint64_t>(std::strtoull(v, nullptr, 10))
                 : static_cast<std::uint64_t>(std::random_device{}()) ^ static_cast<std::uint64_t>(::getpid());
}

const Config& config() {
  static const Config c;
  return c;
}

// ---- vector clocks ----------------------------------------------------------------------------
void join(VectorClock& into, const VectorClock& other) {
  for (const auto& [id, tick] : other) {
    auto& t = into[id];
    t = std::max(t, tick);
  }
}

Runtime& runtime() {
  static Runtime* r = [] {
    auto* rt = new Runtime;  // lives as long as the process: worker threads use it until exit
    rt->devices.resize(static_cast<std::size_t>(std::max(config().devices, 1)));
    for (std::size_t i = 0; i < rt->devices.size(); ++i) rt->devices[i].index = static_cast<int>(i);
    return rt;
  }();
  return *r;
}

thread_local int t_device = 0;
namespace {
thread_local cudaError_t t_last_error = cudaSuccess;
}  // namespace

cudaError_t record_error(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

// ---- the workers ---------------------------------------------------------------------------------
void worker_loop(Stream* s) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  for (;;) {
    rt.changed.wait(lock,
                    [&] { return (!s->ops.empty() && s->ops.front()->released) || (s->destroyed && s->ops.empty()); });
    if (s->ops.empty()) break;  // destroyed and drained
    OpPtr op = s->ops.front();
    if (op->waits_for) rt.changed.wait(lock, [&] { return op->waits_for->done; });
    lock.unlock();
    if (config().trace)
      std::fprintf(stderr, "ember software GPU: stream %d runs #%llu %s\n", s->id,
                   static_cast<unsigned long long>(op->tick), op->what.c_str());
    if (op->work) {
      std::unique_lock<std::mutex> alone(rt.exclusive, std::defer_lock);
      if (config().schedules > 1) alone.lock();
      op->work();
    }
    lock.lock();
    op->finished = Clock::now();
    op->done = true;
    s->ops.pop_front();
    rt.changed.notify_all();
  }
  delete s;
}

// Marks `op` and everything before it on its stream as needed, and what they wait for in turn.
void release_through(Runtime& rt, const OpPtr& op) {
  if (!op || op->released) return;
  // The released operations of a stream are a prefix of its queue: walk back from `op` to it.
  std::vector<OpPtr> waits;
  const auto& ops = op->stream->ops;
  auto it = std::find(ops.rbegin(), ops.rend(), op);
  for (; it != ops.rend() && !(*it)->released; ++it) {
    (*it)->released = true;
    if ((*it)->waits_for) waits.push_back((*it)->waits_for);
  }
  op->released = true;
  for (const OpPtr& w : waits) release_through(rt, w);
  rt.changed.notify_all();
}

void wait_done(Runtime& rt, std::unique_lock<std::mutex>& lock, const OpPtr& op) {
  if (!op) return;
  release_through(rt, op);
  rt.changed.wait(lock, [&] { return op->done; });
  join(rt.host_clock, op->clock);
}

Stream* new_stream(Runtime& rt, int device, bool blocking, bool legacy) {
  auto* s = new Stream;
  s->id = rt.next_stream_id++;
  s->device = device;
  s->blocking = blocking;
  s->legacy = legacy;
  rt.streams.insert(s);
  rt.destroyed.erase(s);  // the address names a new stream now
  std::thread(worker_loop, s).detach();
  return s;
}

Stream* legacy_stream(Runtime& rt, int device) {
  Device& d = rt.devices[static_cast<std::size_t>(device)];
  if (!d.legacy) d.legacy = new_stream(rt, device, true, true);
  return d.legacy;
}

// The stream a handle names; null for an unknown handle. A destroyed one is reported: CUDA leaves a
// call on it undefined (a stream-ordered free there may never run), the software GPU says so.
Stream* resolve(Runtime& rt, cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread)
    return legacy_stream(rt, t_device);
  auto* s = reinterpret_cast<Stream*>(handle);
  if (const auto gone = rt.destroyed.find(handle); gone != rt.destroyed.end())
    fail("a call on stream " + std::to_string(gone->second) +
         " after cudaStreamDestroy: work (or a stream-ordered free) issued to a destroyed stream");
  if (!rt.streams.count(s) || s->destroyed) return nullptr;
  return s;
}

// ---- memory and the checks between streams -------------------------------------------------------
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

std::string describe(const Memory& m) {
  std::ostringstream out;
  out << m.origin << " at " << static_cast<const void*>(m.base);
  return out.str();
}

bool ordered_before(const Memory::Use& use, const Op& op) {
  if (use.stream_id == op.stream_id) return true;
  const auto it = op.clock.find(use.stream_id);
  return it != op.clock.end() && it->second >= use.tick;
}

[[noreturn]] void race(const Op& op, const Memory& m, bool write, const Memory::Use& other, bool other_write) {
  fail(op.what + " on stream " + std::to_string(op.stream_id) + (write ? " writes " : " reads ") + describe(m) +
       ", which " + other.what + " on stream " + std::to_string(other.stream_id) +
       (other_write ? " writes" : " reads") +
       ", and nothing orders one after the other: a missing synchronization between streams (record an event "
       "after the first and make the second's stream wait for it)");
}

// Checks one access of `op` against the memory's history and records it.
void check_access(Runtime& rt, const Op& op, const Access& a) {
  Memory* m = find_memory(rt, a.address, a.bytes == 0);
  if (!m) {
    fail(op.what + ": " + a.what + " (" + std::to_string(a.bytes) + " bytes at " +
         hex(reinterpret_cast<std::uintptr_t>(a.address)) +
         ") is not in any device allocation or pinned host buffer: the GPU cannot reach it");
  }
  if (m->graph && m->graph != op.replay_of)
    fail(op.what + ": " + a.what + " uses " + describe(*m) +
         ", which was allocated inside a CUDA graph capture and belongs to that graph: only its replays may use it");
  if (m->freed)
    fail(op.what + ": " + a.what + " uses " + describe(*m) + " after its free (" +
         (m->freed_on ? "cudaFreeAsync on stream " + std::to_string(m->freed_on->id) : std::string("cudaFree")) +
         "): use after a stream-ordered free");
  const char* begin = static_cast<const char*>(a.address);
  if (begin + a.bytes > m->base + m->size)
    fail(op.what + ": " + a.what + " reaches " + std::to_string(begin + a.bytes - (m->base + m->size)) +
         " bytes past the end of " + describe(*m) + " (" + std::to_string(m->size) + " bytes)");
  if (m->device < 0) return;  // pinned host memory: the host's own side is checked at the copy
  if (m->last_write && !ordered_before(*m->last_write, op)) race(op, *m, a.write, *m->last_write, true);
  if (a.write)
    for (const auto& [id, use] : m->reads)
      if (!ordered_before(use, op)) race(op, *m, true, use, false);
  const Memory::Use mine{op.stream_id, op.tick, op.what};
  if (a.write) {
    m->last_write = mine;
    m->reads.clear();
  } else {
    m->reads[op.stream_id] = mine;
  }
}

// ---- enqueueing ----------------------------------------------------------------------------------
cudaError_t sticky_error(Runtime& rt, int device) { return rt.devices[static_cast<std::size_t>(device)].sticky; }

OpPtr enqueue(Runtime& rt, Stream* s, std::string what, const std::vector<Access>& accesses, std::function<void()> work,
              OpPtr waits_for, cudaGraphNodeType type, std::function<std::function<void()>()> make_work) {
  if (capturing(s)) {
    if (!make_work) make_work = [work] { return work; };
    return capture_node(rt, s, type, std::move(what), accesses, std::move(make_work));
  }
  auto op = std::make_shared<Op>();
  op->replay_of = t_replaying;
  op->what = std::move(what);
  op->stream = s;
  op->stream_id = s->id;
  op->work = std::move(work);
  op->clock = s->clock;
  join(op->clock, rt.host_clock);
  // The legacy default stream and blocking streams wait for each other's earlier work.
  if (s->legacy) {
    for (Stream* other : rt.streams)
      if (other != s && other->blocking && !other->destroyed && other->device == s->device && other->last &&
          !other->last->done && !op->waits_for) {
        join(op->clock, other->last->clock);
        op->waits_for = other->last;  // the most recent of them suffices for ember's use; see README
      }
  } else if (s->blocking) {
    Stream* legacy = legacy_stream(rt, s->device);
    if (legacy->last && !legacy->last->done) {
      join(op->clock, legacy->last->clock);
      if (!waits_for) waits_for = legacy->last;
    }
  }
  if (waits_for) {
    join(op->clock, waits_for->clock);
    op->waits_for = waits_for;
  }
  op->tick = ++s->tick;
  op->clock[s->id] = op->tick;
  if (config().trace)
    std::fprintf(stderr, "ember software GPU: stream %d issues #%llu %s\n", s->id,
                 static_cast<unsigned long long>(op->tick), op->what.c_str());
  s->clock = op->clock;
  for (const Access& a : accesses) check_access(rt, *op, a);
  s->ops.push_back(op);
  s->last = op;
  if (config().eager) release_through(rt, op);
  rt.changed.notify_all();
  return op;
}

std::string bytes_text(std::size_t n) { return std::to_string(n) + " bytes"; }

// A kind of memory for a copy's endpoint.
enum class Side { device, pinned, pageable };
Side side_of(Runtime& rt, const void* p) {
  const Memory* m = find_memory(rt, p);
  if (!m || m->freed) return Side::pageable;
  return m->device >= 0 ? Side::device : Side::pinned;
}

std::uint64_t checksum(const void* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  const auto* c = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ULL;
  return h;
}

cudaError_t copy_async(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, cudaStream_t stream,
                       bool synchronous) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  if (cudaError_t e = sticky_error(rt, t_device)) return record_error(e);
  Stream* s = resolve(rt, stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (synchronous)
    if (cudaError_t e = unsafe_during_capture(rt, "cudaMemcpy")) return record_error(e);
  if (cudaError_t e = legacy_conflict(rt, s)) return record_error(e);
  if (n == 0) return cudaSuccess;
  const Side from = side_of(rt, src), to = side_of(rt, dst);
  // A copy from or into pageable memory finishes (or is staged) at the call: it cannot be captured.
  if (from == Side::pageable || to == Side::pageable)
    if (cudaError_t e = conflicts_with_capture(rt, s, cudaErrorStreamCaptureUnsupported, "a copy with pageable memory"))
      return record_error(e);
  const auto expects_device = [](cudaMemcpyKind k, bool destination) {
    if (k == cudaMemcpyHostToDevice) return destination;
    if (k == cudaMemcpyDeviceToHost) return !destination;
    return k == cudaMemcpyDeviceToDevice;
  };
  if (kind != cudaMemcpyDefault && kind != cudaMemcpyHostToHost) {
    if (expects_device(kind, true) != (to == Side::device) || expects_device(kind, false) != (from == Side::device))
      return record_error(cudaErrorInvalidValue);
  }
  std::ostringstream what;
  what << (synchronous ? "cudaMemcpy " : "cudaMemcpyAsync ") << (from == Side::device ? "device" : "host") << "→"
       << (to == Side::device ? "device" : "host") << " of " << bytes_text(n);
  if (config().trace) what << " (" << src << " to " << dst << ")";
  std::vector<Access> accesses;
  if (from != Side::pageable) accesses.push_back({src, n, false, "its source"});
  if (to != Side::pageable) accesses.push_back({dst, n, true, "its destination"});
  std::function<void()> work;
  if (from == Side::pageable) {
    // From pageable memory the host may reuse its buffer as soon as the call returns: CUDA stages
    // it first, and so does this runtime.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    work = [dst, staged, n] { std::memcpy(dst, staged->data(), n); };
  }
  std::function<std::function<void()>()> make_work;
  if (from == Side::pinned && !synchronous) {
    // From pinned memory the copy reads the buffer when the stream reaches it, as a GPU's DMA does;
    // a buffer the host refilled in between is reported instead of silently copied. (The sum is
    // taken when the copy is issued: at the call, or at each replay of a graph holding it.)
    const std::string description = what.str();
    const int id = s->id;
    make_work = [dst, src, n, description, id]() -> std::function<void()> {
      const std::uint64_t sum = checksum(src, n);
      return [dst, src, n, sum, description, id] {
        if (checksum(src, n) != sum)
          fail(description + " on stream " + std::to_string(id) + ": its pinned source buffer at " +
               hex(reinterpret_cast<std::uintptr_t>(src)) +
               " was written by the host after the copy was issued and before it ran; wait for the copy (an event "
               "recorded after it, or a synchronization) before refilling the buffer");
        std::memcpy(dst, src, n);
      };
    };
    work = make_work();
  } else if (from != Side::pageable) {
    work = [dst, src, n] { std::memmove(dst, src, n); };
  }
  OpPtr op = enqueue(rt, s, what.str(), accesses, work, nullptr, cudaGraphNodeTypeMemcpy, make_work);
  // Synchronous copies, and copies into pageable memory, return only when done (as in CUDA).
  if (synchronous || to == Side::pageable) wait_done(rt, lock, op);
  return sticky_error(rt, t_device) ? record_error(sticky_error(rt, t_device)) : cudaSuccess;
}

// ---- allocation ----------------------------------------------------------------------------------
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

void device_synchronize(Runtime& rt, std::unique_lock<std::mutex>& lock, int device);

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
    d.in_use += size;
    d.peak = std::max(d.peak, d.in_use);
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
      d.in_use += size;
      d.peak = std::max(d.peak, d.in_use);
      // Handing the block out again writes it, as far as the other streams are concerned.
      m->last_write = Memory::Use{s->id, s->tick + 1, call};
      enqueue(rt, s, call, {}, nullptr);
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
  d.in_use += size;
  d.peak = std::max(d.peak, d.in_use);
  if (s) {  // the allocation is a write, in stream order
    m->last_write = Memory::Use{s->id, s->tick + 1, call};
    enqueue(rt, s, call, {}, nullptr);
  }
  *ptr = m->base;
  return cudaSuccess;
}

void device_synchronize(Runtime& rt, std::unique_lock<std::mutex>& lock, int device) {
  std::vector<OpPtr> last;
  for (Stream* s : rt.streams)
    if (s->device == device && s->last) last.push_back(s->last);
  for (const OpPtr& op : last) wait_done(rt, lock, op);
}

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorPeerAccessAlreadyEnabled:
      return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureIsolation:
      return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    case cudaErrorStreamCaptureWrongThread:
      return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    default:
      return "cudaErrorUnknown";
  }
}

const char* error_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorNotSupported:
      return "operation not supported (by the software GPU)";
    case cudaErrorPeerAccessAlreadyEnabled:
      return "peer access is already enabled";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    default:
      return "unknown error";
  }
}

cudaError_t enqueue_work(cudaStream_t stream, const std::string& what, std::vector<Access> accesses,
                         std::function<void()> work) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  if (cudaError_t e = sticky_error(rt, t_device)) return record_error(e);
  Stream* s = resolve(rt, stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = legacy_conflict(rt, s)) return record_error(e);
  enqueue(rt, s, what, accesses, std::move(work));  // captured as a kernel node: a library call, as modelled
  return cudaSuccess;
}

int current_device() { return t_device; }

}  // namespace ember_sim::rt

// ---- launches --------------------------------------------------------------------------------------
namespace ember_sim {

namespace {
thread_local std::vector<ReachedRange> t_reached;  // declared for the next launch from this thread
}  // namespace

void note_reached(const ReachedRange& range) { t_reached.push_back(range); }

cudaError_t enqueue_launch(LaunchRequest r) {
  using namespace rt;
  const std::vector<ReachedRange> reached = std::exchange(t_reached, {});  // this launch's, even if it fails
  Runtime& run = runtime();
  std::unique_lock<std::mutex> lock(run.mutex);
  if (cudaError_t e = sticky_error(run, t_device)) return record_error(e);
  Stream* s = resolve(run, r.stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  const dim3 g = r.grid, b = r.block;
  // sm_90's limits; an empty grid or block is an error too.
  const std::uint64_t threads = std::uint64_t{b.x} * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024 || g.x == 0 ||
      g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    return record_error(cudaErrorInvalidConfiguration);
  const auto limit = run.max_dynamic_shared.find(r.function);
  const std::size_t max_shared =
      limit == run.max_dynamic_shared.end() ? 48 * 1024 : static_cast<std::size_t>(limit->second);
  if (r.shared_bytes > max_shared) return record_error(cudaErrorInvalidValue);
  std::string what = "kernel " + r.kernel;
  if (config().trace) {
    std::ostringstream grid;
    grid << " <<<(" << g.x << "," << g.y << "," << g.z << "), (" << b.x << "," << b.y << "," << b.z << "), "
         << r.shared_bytes << ">>>";
    for (const PointerArg& p : r.pointers) grid << " arg" << p.index << "=" << p.address;
    what += grid.str();
  }
  std::vector<Access> accesses;
  for (const PointerArg& p : r.pointers) {
    accesses.push_back({p.address, 0, p.writable, "argument " + std::to_string(p.index)});
    const Memory* m = find_memory(run, p.address, true);
    if (m && m->device >= 0 && m->device != s->device &&
        !run.devices[static_cast<std::size_t>(s->device)].peers.count(m->device))
      fail(what + ": argument " + std::to_string(p.index) + " points to memory of cuda:" + std::to_string(m->device) +
           " but the kernel runs on cuda:" + std::to_string(s->device) + " without peer access");
  }
  for (const ReachedRange& m : reached)
    accesses.push_back({m.address, m.bytes, m.writable, "memory its launcher says it reaches through its arguments"});
  if (!run.seed_printed) {
    run.seed_printed = true;
    std::fprintf(stderr,
                 "ember software GPU: blocks run in a shuffled order, seed %llu (EMBER_SIM_SEED=%llu repeats it)\n",
                 static_cast<unsigned long long>(config().seed), static_cast<unsigned long long>(config().seed));
  }
  if (cudaError_t e = legacy_conflict(run, s)) return record_error(e);
  // With EMBER_SIM_SCHEDULES=n the launch runs under n block orders, from the same starting
  // memory, and the device's memory must come out bit for bit the same each time. All of it, not
  // only what the arguments point at: a kernel may write through pointers it reads from memory
  // (the optimizers' parameter slots). The other streams wait meanwhile (Runtime::exclusive).
  auto request = std::make_shared<LaunchRequest>(std::move(r));
  const int device = s->device;
  enqueue(run, s, what, accesses, [request, device] {
    // Numbered when it runs, so that every replay of a captured launch has a block order of its own.
    const std::uint64_t launch_number = ++runtime().launches;
    KernelRun k{
        request->kernel, request->grid, request->block, request->shared_bytes, request->run, request->args.get(), {}};
    std::vector<std::pair<char*, std::size_t>> outputs;
    if (config().schedules > 1 || races::kEnabled) {
      Runtime& rt2 = runtime();
      std::lock_guard<std::mutex> l(rt2.mutex);
      for (const auto& [base, m] : rt2.memory) {
        if (races::kEnabled) k.memory.emplace_back(m->base, m->size);
        if (config().schedules > 1 && m->device == device)
          outputs.emplace_back(m->base, m->size);  // (a freed block's free may not have run)
      }
    }
    // The first block order is shuffled; the second is its reverse, so that every two blocks meet
    // in both orders (a race between any two shows); any further ones are shuffled afresh. The
    // threads of a block run in ascending order, then descending (so that every two threads meet
    // in both orders), then shuffled with warps kept together, then shuffled with warps
    // interleaved, and so on.
    const auto order_for = [&](int schedule) {
      const std::uint64_t blocks = std::uint64_t{k.grid.x} * k.grid.y * k.grid.z;
      Schedule plan;
      plan.blocks.resize(blocks);
      for (std::uint64_t i = 0; i < blocks; ++i) plan.blocks[i] = i;
      std::mt19937_64 rng(config().seed ^ (launch_number * 0x9E3779B97F4A7C15ULL) ^
                          (static_cast<std::uint64_t>(schedule == 1 ? 0 : schedule) << 56));
      std::shuffle(plan.blocks.begin(), plan.blocks.end(), rng);
      if (schedule == 1) std::reverse(plan.blocks.begin(), plan.blocks.end());
      constexpr ThreadOrder kOrders[] = {ThreadOrder::ascending, ThreadOrder::descending, ThreadOrder::warps_together,
                                         ThreadOrder::interleaved};
      plan.threads = schedule < 4 ? kOrders[schedule] : kOrders[2 + schedule % 2];
      plan.seed = rng();
      return plan;
    };
    const auto snapshot = [&] {
      std::vector<std::vector<char>> copy;
      for (const auto& [base, size] : outputs) copy.emplace_back(base, base + size);
      return copy;
    };
    const std::vector<std::vector<char>> before = snapshot();
    bool ok = execute(k, order_for(0));
    const std::vector<std::vector<char>> first = snapshot();
    for (int schedule = 1; ok && schedule < config().schedules; ++schedule) {
      for (std::size_t i = 0; i < outputs.size(); ++i)
        std::memcpy(outputs[i].first, before[i].data(), outputs[i].second);
      ok = execute(k, order_for(schedule));
      for (std::size_t i = 0; ok && i < outputs.size(); ++i) {
        const char* again = outputs[i].first;
        const auto at = std::mismatch(first[i].begin(), first[i].end(), again).first - first[i].begin();
        if (at == static_cast<std::ptrdiff_t>(first[i].size())) continue;
        fail("kernel " + k.kernel + " wrote different results under two schedules: byte " + std::to_string(at) +
             " of the device allocation at " + hex(reinterpret_cast<std::uintptr_t>(again)) +
             " differs (schedules 1 and " + std::to_string(schedule + 1) +
             ", in both the block order and the order of each block's threads). Blocks race, a barrier is "
             "missing, or the kernel reads memory it never wrote");
      }
    }
    if (!ok) {
      Runtime& rt2 = runtime();
      std::lock_guard<std::mutex> l(rt2.mutex);
      rt2.devices[static_cast<std::size_t>(device)].sticky = cudaErrorLaunchFailure;
    }
  });
  return cudaSuccess;
}

}  // namespace ember_sim

// ---- the CUDA runtime API ------------------------------------------------------------------------
using namespace ember_sim::rt;
using ember_sim::fail;
using ember_sim::hex;

cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (cudaError_t sticky = sticky_error(rt, t_device)) return sticky;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (cudaError_t sticky = sticky_error(rt, t_device)) return sticky;
  return t_last_error;
}

const char* cudaGetErrorName(cudaError_t error) { return error_name(error); }
const char* cudaGetErrorString(cudaError_t error) { return error_string(error); }

cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return cudaErrorInvalidValue;
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return cudaErrorInvalidValue;
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return cudaErrorInvalidValue;
  *count = static_cast<int>(runtime().devices.size());
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= static_cast<int>(runtime().devices.size())) return record_error(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return cudaErrorInvalidValue;
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return cudaErrorInvalidValue;
  if (device < 0 || device >= static_cast<int>(runtime().devices.size())) return record_error(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "ember software GPU, simulated sm_90");
  prop->totalGlobalMem = config().capacity;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->canMapHostMemory = 1;
  prop->unifiedAddressing = 1;
  prop->concurrentKernels = 1;
  prop->asyncEngineCount = 2;
  prop->memoryPoolsSupported = 1;
  prop->pciDeviceID = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return cudaErrorInvalidValue;
  cudaDeviceProp p;
  if (cudaError_t e = cudaGetDeviceProperties(&p, device)) return e;
  switch (attr) {
    case cudaDevAttrL2CacheSize:
      *value = p.l2CacheSize;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      return cudaSuccess;
    case cudaDevAttrMemoryPoolsSupported:
      *value = 1;
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = 32;
      return cudaSuccess;
    default:
      return record_error(cudaErrorNotSupported);
  }
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (!can) return cudaErrorInvalidValue;
  const int n = static_cast<int>(runtime().devices.size());
  if (device < 0 || device >= n || peer < 0 || peer >= n) return record_error(cudaErrorInvalidDevice);
  *can = device != peer;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (peer < 0 || peer >= static_cast<int>(rt.devices.size()) || peer == t_device)
    return record_error(cudaErrorInvalidDevice);
  if (!rt.devices[static_cast<std::size_t>(t_device)].peers.insert(peer).second)
    return record_error(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  if (cudaError_t e = unsafe_during_capture(rt, "cudaDeviceSynchronize")) return record_error(e);
  device_synchronize(rt, lock, t_device);
  return record_error(sticky_error(rt, t_device));
}

// ---- memory ---------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t size) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
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
  if (cudaError_t e = sticky_error(rt, t_device)) return record_error(e);
  Stream* s = resolve(rt, stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = legacy_conflict(rt, s)) return record_error(e);
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

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return copy_async(dst, src, n, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy_async(dst, src, n, kind, stream, false);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t n,
                                cudaStream_t stream) {
  Runtime& rt = runtime();
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    const Memory* d = find_memory(rt, dst);
    const Memory* s = find_memory(rt, src);
    if (!d || !s || d->device != dst_device || s->device != src_device) return record_error(cudaErrorInvalidValue);
  }
  return copy_async(dst, src, n, cudaMemcpyDeviceToDevice, stream, false);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t n, cudaStream_t stream) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (cudaError_t e = sticky_error(rt, t_device)) return record_error(e);
  Stream* s = resolve(rt, stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = legacy_conflict(rt, s)) return record_error(e);
  if (n == 0) return cudaSuccess;
  enqueue(
      rt, s, "cudaMemsetAsync of " + bytes_text(n), {{ptr, n, true, "its destination"}},
      [ptr, value, n] { std::memset(ptr, value, n); }, nullptr, cudaGraphNodeTypeMemset);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t n) {
  {
    Runtime& rt = runtime();
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (cudaError_t e = unsafe_during_capture(rt, "cudaMemset")) return record_error(e);
  }
  if (cudaError_t e = cudaMemsetAsync(ptr, value, n, nullptr)) return e;
  return cudaStreamSynchronize(nullptr);
}

// ---- streams and events -----------------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (!stream) return cudaErrorInvalidValue;
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  *stream = reinterpret_cast<cudaStream_t>(new_stream(rt, t_device, !(flags & cudaStreamNonBlocking), false));
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  if (!s || s->legacy) return record_error(cudaErrorInvalidResourceHandle);
  if (s->capture) return record_error(cudaErrorIllegalState);  // end the capture first
  // As in CUDA, work already issued still runs; the worker ends when it is done.
  if (s->last) release_through(rt, s->last);
  s->destroyed = true;
  rt.streams.erase(s);
  rt.destroyed[s] = s->id;
  rt.changed.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = conflicts_with_capture(rt, s, cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize"))
    return record_error(e);
  if (cudaError_t e = unsafe_during_capture(rt, "cudaStreamSynchronize")) return record_error(e);
  wait_done(rt, lock, s->last);
  return record_error(sticky_error(rt, s->device));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = conflicts_with_capture(rt, s, cudaErrorStreamCaptureUnsupported, "cudaStreamQuery"))
    return record_error(e);
  if (!s->last || s->last->done) {
    if (s->last) join(rt.host_clock, s->last->clock);
    return cudaSuccess;
  }
  release_through(rt, s->last);
  return cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  auto* e = reinterpret_cast<Event*>(event);
  if (!s || !rt.events.count(e)) return record_error(cudaErrorInvalidResourceHandle);
  if (capturing(s)) {
    // Within one capture an event orders nothing more than the stream already does; one recorded
    // outside it would be a dependency the graph cannot hold.
    if (e->captured_in == s->capture->id || !e->record) return cudaSuccess;
    return record_error(conflicts_with_capture(rt, s, cudaErrorStreamCaptureIsolation,
                                               "cudaStreamWaitEvent on an event recorded outside the capture"));
  }
  // Joining another stream into a capture through an event recorded in it is not modelled.
  if (e->captured_in != 0) return record_error(cudaErrorStreamCaptureUnsupported);
  if (cudaError_t le = legacy_conflict(rt, s)) return record_error(le);
  if (!e->record) return cudaSuccess;  // an event never recorded is complete
  enqueue(rt, s, "cudaStreamWaitEvent", {}, nullptr, e->record);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (!event) return cudaErrorInvalidValue;
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* e = new Event;
  e->device = t_device;
  e->timing = !(flags & cudaEventDisableTiming);
  rt.events.insert(e);
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* e = reinterpret_cast<Event*>(event);
  if (!rt.events.erase(e)) return record_error(cudaErrorInvalidResourceHandle);
  delete e;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  auto* e = reinterpret_cast<Event*>(event);
  if (!s || !rt.events.count(e)) return record_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t le = legacy_conflict(rt, s)) return record_error(le);
  // Inside a capture the record is a point in the graph, not a node: nothing outside may wait for
  // or query it until the capture ends.
  e->captured_in = capturing(s) ? s->capture->id : 0;
  e->record = capturing(s) ? nullptr : enqueue(rt, s, "cudaEventRecord", {}, nullptr);
  return cudaSuccess;
}

namespace {
// An event last recorded inside a capture in progress cannot be waited for or queried.
cudaError_t captured_event_conflict(Runtime& rt, const Event& e, const char* call) {
  if (e.captured_in == 0) return cudaSuccess;
  for (Stream* s : rt.streams)
    if (s->capture && s->capture->id == e.captured_in)
      return conflicts_with_capture(rt, s, cudaErrorStreamCaptureUnsupported, call);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  auto* e = reinterpret_cast<Event*>(event);
  if (!rt.events.count(e)) return record_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t c = captured_event_conflict(rt, *e, "cudaEventSynchronize")) return record_error(c);
  if (cudaError_t c = unsafe_during_capture(rt, "cudaEventSynchronize")) return record_error(c);
  const OpPtr record = e->record;
  wait_done(rt, lock, record);
  return record_error(sticky_error(rt, e->device));
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* e = reinterpret_cast<Event*>(event);
  if (!rt.events.count(e)) return record_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t c = captured_event_conflict(rt, *e, "cudaEventQuery")) return record_error(c);
  if (!e->record || e->record->done) {
    if (e->record) join(rt.host_clock, e->record->clock);
    return cudaSuccess;
  }
  release_through(rt, e->record);
  return cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* a = reinterpret_cast<Event*>(start);
  auto* b = reinterpret_cast<Event*>(end);
  if (!ms || !rt.events.count(a) || !rt.events.count(b)) return record_error(cudaErrorInvalidResourceHandle);
  if (!a->timing || !b->timing) return record_error(cudaErrorInvalidResourceHandle);
  if (!a->record || !b->record) return record_error(cudaErrorInvalidResourceHandle);
  if (!a->record->done || !b->record->done) return record_error(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(b->record->finished - a->record->finished).count();
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || value > 227 * 1024) return record_error(cudaErrorInvalidValue);
  rt.max_dynamic_shared[func] = value;
  return cudaSuccess;
}
