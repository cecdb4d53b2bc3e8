// The software GPU's runtime state, shared by the runtime (runtime.cpp and the API's files beside
// it) and stream capture (graphs.cpp): devices, streams and their operations with vector clocks,
// events, memory and its history, and the captures in progress. Every field is guarded by
// Runtime::mutex.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "graphs.h"
#include "runtime.h"

namespace ember_sim::rt {

using Clock = std::chrono::steady_clock;
constexpr std::uint8_t kPoison = 0xFF;

// ---- configuration (the simulator's own environment variables) ---------------------------------
long env_number(const char* name, long fallback);

struct Config {
  int devices = static_cast<int>(env_number("EMBER_SIM_DEVICES", 2));
  std::size_t capacity = static_cast<std::size_t>(env_number("EMBER_SIM_MEMORY_MB", 4096)) << 20;
  bool eager = env_number("EMBER_SIM_EAGER", 0) != 0;
  int schedules = static_cast<int>(env_number("EMBER_SIM_SCHEDULES", 1));
  bool trace = env_number("EMBER_SIM_TRACE", 0) != 0;  // print each operation as it is issued and run
  std::uint64_t seed = 0;                              // EMBER_SIM_SEED, or random
  Config();
};
const Config& config();

// ---- vector clocks -----------------------------------------------------------------------------
using VectorClock = std::map<int, std::uint64_t>;  // stream id → how many of its operations
void join(VectorClock& into, const VectorClock& other);

struct Stream;

struct Op {
  std::string what;
  Stream* stream = nullptr;
  int stream_id = 0;
  std::uint64_t tick = 0;
  VectorClock clock;
  bool released = false, done = false;
  std::function<void()> work;
  std::shared_ptr<Op> waits_for;             // a cudaStreamWaitEvent: the event's record
  const graphs::Graph* replay_of = nullptr;  // issued by a replay of this graph
  Clock::time_point finished;
};
using OpPtr = std::shared_ptr<Op>;

// A capture in progress on a stream (graphs.cpp).
struct Capture {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;  // that began it
  std::shared_ptr<graphs::Graph> graph;
  cudaError_t invalidated = cudaSuccess;  // the first call that broke it, kept for cudaStreamEndCapture
  std::uint64_t id = 0;
};

struct Stream {
  int id = 0;
  int device = 0;
  bool blocking = true;  // synchronizes with the legacy default stream
  bool legacy = false;
  bool destroyed = false;
  std::deque<OpPtr> ops;
  OpPtr last;
  VectorClock clock;
  std::uint64_t tick = 0;
  std::unique_ptr<Capture> capture;  // while cudaStreamBeginCapture is in effect
};

struct Event {
  int device = 0;
  bool timing = true;
  OpPtr record;
  std::uint64_t captured_in = 0;  // the capture its last record was made in (0: none)
};

// One allocation: device memory, or pinned host memory (which the device reaches too).
struct Memory {
  char* base = nullptr;
  std::size_t size = 0;  // as asked for
  int device = -1;       // -1: pinned host memory
  bool pool = false;     // from cudaMallocAsync
  bool freed = false;    // its free has been enqueued (or done)
  std::string origin;
  Stream* freed_on = nullptr;
  OpPtr free_op;                         // its cudaFreeAsync: the block returns to the system only once that has run
  const graphs::Graph* graph = nullptr;  // allocated inside a capture: that graph's alone
  struct Use {
    int stream_id;
    std::uint64_t tick;
    std::string what;
  };
  std::optional<Use> last_write;
  std::map<int, Use> reads;
};

struct Device {
  int index = 0;
  std::size_t in_use = 0, cached = 0, peak = 0;
  std::uint64_t release_threshold = 0;
  cudaError_t sticky = cudaSuccess;
  Stream* legacy = nullptr;
  std::vector<Memory*> pool_cache;  // freed pool blocks, reusable by their stream
  // Pool blocks whose place was reissued at a fresh address: kept allocated and marked freed, so
  // that a dangling pointer to one is still reported (memory.cpp, kQuarantine…). Oldest first.
  std::deque<Memory*> quarantine;
  std::size_t quarantined_bytes = 0;
  std::set<int> peers;
  char pool_handle = 0;  // its address is the device's cudaMemPool_t
};

struct Runtime {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Device> devices;
  std::map<const char*, Memory*> memory;  // by base address
  std::set<Stream*> streams;
  std::set<Event*> events;
  std::map<const void*, int> destroyed;  // handles of destroyed streams → their ids, until reused
  VectorClock host_clock;                // what the host has synchronized with
  int next_stream_id = 1;
  std::uint64_t next_capture_id = 1;
  std::atomic<std::uint64_t> launches{0};                   // numbers each launch's block orders
  std::unordered_map<const void*, int> max_dynamic_shared;  // cudaFuncSetAttribute
  // Held by a stream's worker while it runs an operation, when EMBER_SIM_SCHEDULES > 1: a launch
  // run twice from the same memory must not see other streams change it in between.
  std::mutex exclusive;
  bool seed_printed = false;
};
Runtime& runtime();

extern thread_local int t_device;
// A call that needs the current device's context (CUDA 12 makes it at cudaSetDevice, else at the
// first such call), counted per host thread and device (ember_sim/introspection.h).
void note_context_use(int device);
cudaError_t record_error(cudaError_t e);  // the calling thread's last error, for cudaGetLastError (api.cpp)
cudaError_t sticky_error(Runtime& rt, int device);

// A new stream of `device`, with its worker thread.
Stream* new_stream(Runtime& rt, int device, bool blocking, bool legacy);
// The stream a handle names (the legacy default stream for 0); null for an unknown handle; a
// destroyed one is reported.
Stream* resolve(Runtime& rt, cudaStream_t handle);
// The stream `handle` names, for work the calling thread issues to it, after the checks every
// issue makes in turn: the device's sticky error, an unknown handle, legacy_conflict.
cudaError_t issuing_stream(Runtime& rt, cudaStream_t handle, Stream** s);

// ---- memory (memory.cpp) and the checks between streams (checks.cpp) -------------------------------
Memory* find_memory(Runtime& rt, const void* p, bool or_end = false);
Memory* new_memory(Runtime& rt, std::size_t size, int device, std::string origin);
void release_memory(Runtime& rt, Memory* m);
std::string bytes_text(std::size_t n);  // "n bytes", for messages
std::string describe(const Memory& m);  // its origin and address, for messages
void check_access(Runtime& rt, const Op& op, const Access& a);

// Issues an operation to stream `s`: checked against the other streams and queued — or, while the
// stream is being captured, recorded as a node of kind `type` instead (graphs.cpp), `make_work`
// making its work for each replay (by default `work` itself).
OpPtr enqueue(Runtime& rt, Stream* s, std::string what, const std::vector<Access>& accesses, std::function<void()> work,
              OpPtr waits_for = nullptr, cudaGraphNodeType type = cudaGraphNodeTypeKernel,
              std::function<std::function<void()>()> make_work = nullptr);
void release_through(Runtime& rt, const OpPtr& op);
void wait_done(Runtime& rt, std::unique_lock<std::mutex>& lock, const OpPtr& op);
// Waits for everything issued to the streams of `device`.
void device_synchronize(Runtime& rt, std::unique_lock<std::mutex>& lock, int device);

// ---- capture (graphs.cpp) -------------------------------------------------------------------------
// Records an operation issued to a capturing stream as a node of its graph; returns a completed
// placeholder.
OpPtr capture_node(Runtime& rt, Stream* s, cudaGraphNodeType type, std::string what, std::vector<Access> accesses,
                   std::function<std::function<void()>()> make_work);
bool capturing(const Stream* s);
// The graph a replay is issuing nodes of, on this thread (null otherwise): its memory is its own.
extern thread_local const graphs::Graph* t_replaying;
// The checks of calls during capture; each returns cudaSuccess where the call may go on, or the
// error CUDA gives after invalidating the capture(s) concerned:
// - a "potentially unsafe" call (synchronization, synchronous allocation or copy), forbidden by a
//   global-mode capture on any thread and by a thread-local one on the thread that began it;
cudaError_t unsafe_during_capture(Runtime& rt, const char* call);
// - a call that cannot be captured on `s` itself (its synchronization, a pageable copy), with
//   the error CUDA gives for it;
cudaError_t conflicts_with_capture(Runtime& rt, Stream* s, cudaError_t error, const char* call);
// - work on the legacy stream while a blocking stream of its device is captured.
cudaError_t legacy_conflict(Runtime& rt, Stream* s);

}  // namespace ember_sim::rt
