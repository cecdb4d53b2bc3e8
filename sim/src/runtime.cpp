// The core of the software GPU's CUDA runtime: configuration, vector clocks, the streams' workers,
// enqueueing. The API is spread by concern: memory.cpp, copies.cpp, streams.cpp, launches.cpp,
// api.cpp (errors and devices); checks.cpp holds the checks between streams.
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
#include <array>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <utility>

#include "executor.h"

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
constexpr std::size_t kCountedDevices = 16;
thread_local std::array<std::uint64_t, kCountedDevices> t_context_uses{};
}  // namespace

void note_context_use(int device) {
  if (device >= 0 && static_cast<std::size_t>(device) < kCountedDevices)
    ++t_context_uses[static_cast<std::size_t>(device)];
}

// ---- the workers ---------------------------------------------------------------------------------
namespace {
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
}  // namespace

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

namespace {
Stream* legacy_stream(Runtime& rt, int device) {
  Device& d = rt.devices[static_cast<std::size_t>(device)];
  if (!d.legacy) d.legacy = new_stream(rt, device, true, true);
  return d.legacy;
}
}  // namespace

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

// ---- enqueueing ----------------------------------------------------------------------------------
cudaError_t sticky_error(Runtime& rt, int device) { return rt.devices[static_cast<std::size_t>(device)].sticky; }

cudaError_t issuing_stream(Runtime& rt, cudaStream_t handle, Stream** s) {
  if (cudaError_t e = sticky_error(rt, t_device)) return e;
  *s = resolve(rt, handle);
  if (!*s) return cudaErrorInvalidResourceHandle;
  return legacy_conflict(rt, *s);
}

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

void device_synchronize(Runtime& rt, std::unique_lock<std::mutex>& lock, int device) {
  std::vector<OpPtr> last;
  for (Stream* s : rt.streams)
    if (s->device == device && s->last) last.push_back(s->last);
  for (const OpPtr& op : last) wait_done(rt, lock, op);
}

cudaError_t enqueue_work(cudaStream_t stream, const std::string& what, std::vector<Access> accesses,
                         std::function<void()> work) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  Stream* s = nullptr;
  if (cudaError_t e = issuing_stream(rt, stream, &s)) return record_error(e);
  enqueue(rt, s, what, accesses, std::move(work));  // captured as a kernel node: a library call, as modelled
  return cudaSuccess;
}

int current_device() { return t_device; }

}  // namespace ember_sim::rt

namespace ember_sim {
std::uint64_t context_uses_on_this_thread(int device) {
  return device >= 0 && static_cast<std::size_t>(device) < rt::kCountedDevices
             ? rt::t_context_uses[static_cast<std::size_t>(device)]
             : 0;
}
}  // namespace ember_sim

namespace ember_sim::rt {}  // namespace ember_sim::rt
