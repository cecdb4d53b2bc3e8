// The executor: blocks in order, threads as fibers, barriers, warp operations and their checks.
//
// One dedicated thread runs every launch (a stream's worker hands it over and waits), so the
// fibers, their stacks and the block's shared memory exist once. A block's threads run round
// robin; a thread runs until it finishes, reaches __syncthreads, or takes part in a warp
// operation, and the scheduler resumes it when that barrier or operation is complete. Nothing
// is allocated while a block runs: ThreadSanitizer would otherwise see the executor's own heap
// traffic as races between the fibers.
#include "executor.h"

#include <sys/mman.h>

#include <algorithm>
#include <boost/context/detail/fcontext.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <random>
#include <sstream>
#include <thread>

#include "races.h"
#include "sanitizers.h"

// The block's shared memory: every `__shared__` variable of the simulated sources (cuda_shim.h)
// and the dynamic shared memory below, gathered by shared_memory.ld into whole pages of their own.
extern "C" {
extern char ember_sim_shared_begin[];
extern char ember_sim_shared_end[];
}

namespace ember_sim {
namespace {

namespace ctx = boost::context::detail;

constexpr unsigned kWarp = 32;
constexpr unsigned kMaxThreads = 1024;
constexpr std::size_t kPage = 4096;
constexpr std::uint8_t kPoison = 0xFF;                 // a float of 0xFFFFFFFF is NaN, an int −1
constexpr std::size_t kMaxDynamicShared = 227 * 1024;  // sm_90's opt-in limit

// Dynamic shared memory of the launch running now: in the shared-memory pages, poisoned with them.
__attribute__((section(".ember_sim_shared"), aligned(16))) unsigned char dynamic_arena[kMaxDynamicShared];

enum class Status : std::uint8_t { runnable, at_barrier, at_warp, exited, trapped };

struct Fiber {
  SimThread* thread = nullptr;  // at the base of its stack span
  ctx::fcontext_t context = nullptr;
  void* stack_bottom = nullptr;  // lowest usable address (for AddressSanitizer)
  std::size_t stack_size = 0;
  void* tsan = nullptr;
};

struct WarpOp {
  WarpOpKind kind = WarpOpKind::syncwarp;
  unsigned mask = 0, arrived = 0;
  int width = 32;
  std::uint64_t value[kWarp] = {};
  int arg[kWarp] = {};
};

const char* op_name(WarpOpKind k) {
  switch (k) {
    case WarpOpKind::shfl:
      return "__shfl_sync";
    case WarpOpKind::shfl_xor:
      return "__shfl_xor_sync";
    case WarpOpKind::shfl_down:
      return "__shfl_down_sync";
    case WarpOpKind::shfl_up:
      return "__shfl_up_sync";
    case WarpOpKind::ballot:
      return "__ballot_sync";
    case WarpOpKind::any:
      return "__any_sync";
    case WarpOpKind::all:
      return "__all_sync";
    case WarpOpKind::syncwarp:
      return "__syncwarp";
  }
  return "?";
}

}  // namespace

std::string hex(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

namespace {

std::string dim_text(unsigned x, unsigned y, unsigned z) {
  std::ostringstream out;
  out << "(" << x << ", " << y << ", " << z << ")";
  return out.str();
}

struct State {
  // The fiber pool: one fiber per thread of the largest block seen, made once.
  char* region = nullptr;
  std::vector<Fiber> fibers;
  ctx::fcontext_t scheduler = nullptr;
  void* scheduler_tsan = nullptr;
  const void* main_stack_bottom = nullptr;  // the executor thread's stack, learned at first switch
  std::size_t main_stack_size = 0;

  // The launch and block running now (valid only while `running`).
  bool running = false;
  const KernelRun* launch = nullptr;
  BlockInfo block{};
  unsigned threads = 0;
  Status status[kMaxThreads] = {};
  unsigned barriers_passed[kMaxThreads] = {};
  unsigned barriers_completed = 0;
  WarpOp warps[kMaxThreads / kWarp];
  unsigned current = 0;  // the thread whose fiber runs now
  bool trapped = false;  // a thread called __trap(): the launch stops
  // The order in which the scheduler resumes the block's threads (ThreadOrder), a permutation.
  unsigned thread_order[kMaxThreads] = {};
};

State& state() {
  static State* s = new State;  // lives as long as the process: fibers may still reference it
  return *s;
}

// The fiber that runs thread `t` of the block running now.
Fiber& fiber_of(State& s, unsigned t) { return s.fibers[t]; }
const Fiber& fiber_of(const State& s, unsigned t) { return s.fibers[t]; }

std::string where() {
  const State& s = state();
  if (!s.running) return "";
  const SimThread& t = *fiber_of(s, s.current).thread;
  return " [kernel " + s.launch->kernel + ", block " +
         dim_text(s.block.block_idx.x, s.block.block_idx.y, s.block.block_idx.z) + ", thread " +
         dim_text(t.thread_idx.x, t.thread_idx.y, t.thread_idx.z) + "]";
}

// ---- switching -----------------------------------------------------------------------------------
// Switches to the context `to` — a fiber, or the scheduler on the executor thread's own stack —
// telling the sanitizers; returns, when something switches back, where `to` stopped.
ctx::fcontext_t switch_stack(ctx::fcontext_t to, const void* stack_bottom, std::size_t stack_size, void* tsan) {
  void* fake = nullptr;
  sanitizers::start_switch(&fake, stack_bottom, stack_size);
  sanitizers::tsan_switch(tsan);
  const ctx::transfer_t back = ctx::jump_fcontext(to, nullptr);
  sanitizers::finish_switch(fake, nullptr, nullptr);
  return back.fctx;
}

void switch_to_scheduler() {
  State& s = state();
  s.scheduler = switch_stack(s.scheduler, s.main_stack_bottom, s.main_stack_size, s.scheduler_tsan);
}

void check_exit_leaves_no_warp_waiting(State& s) {
  const unsigned warp = s.current / kWarp, lane = s.current % kWarp;
  const WarpOp& w = s.warps[warp];
  if (w.arrived != 0 && (w.mask >> lane & 1u))
    fail(std::string("lane ") + std::to_string(lane) + " returned while other lanes of its warp wait for it in " +
         op_name(w.kind) + " with mask " + hex(w.mask) + " (every lane in the mask must take part)");
}

void fiber_main(ctx::transfer_t t) {
  State& s = state();
  s.scheduler = t.fctx;
  sanitizers::finish_switch(nullptr, &s.main_stack_bottom, &s.main_stack_size);
  // ThreadSanitizer watches the host's threads; the simulated threads' accesses are the race
  // checker's (races.h), which knows CUDA's orders. A fiber runs only kernels.
  sanitizers::ignore_accesses_begin();
  for (;;) {
    s.launch->run(s.launch->args);
    check_exit_leaves_no_warp_waiting(s);
    s.status[s.current] = Status::exited;
    switch_to_scheduler();
  }
}

void run_fiber(unsigned index) {
  State& s = state();
  Fiber& f = fiber_of(s, index);
  s.current = index;
  f.context = switch_stack(f.context, f.stack_bottom, f.stack_size, f.tsan);
}

// A fiber left suspended inside a kernel (the launch was stopped by __trap) starts afresh.
void reset_fiber(Fiber& f) {
  char* span = reinterpret_cast<char*>(f.thread);
  f.context = ctx::make_fcontext(span + kStackSpan, f.stack_size, fiber_main);
}

// A fiber in the stack span at `span`: [SimThread page][guard page][stack, growing down].
Fiber make_fiber(char* span) {
  mprotect(span + kPage, kPage, PROT_NONE);
  Fiber f;
  f.thread = new (span) SimThread{};
  f.stack_bottom = span + 2 * kPage;
  f.stack_size = kStackSpan - 2 * kPage;
  f.context = ctx::make_fcontext(span + kStackSpan, f.stack_size, fiber_main);
  f.tsan = sanitizers::tsan_create_fiber();
  return f;
}

// Makes the fibers for blocks of up to `count` threads, in one region whose spans are aligned to
// kStackSpan. The pool only grows, and only between launches.
void make_fibers(unsigned count) {
  State& s = state();
  if (!s.scheduler_tsan) s.scheduler_tsan = sanitizers::tsan_current_fiber();
  if (!s.region) {
    const std::size_t bytes = kMaxThreads * kStackSpan + kStackSpan;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("cannot reserve the fibers' stacks");
    s.region = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(p) + kStackSpan - 1) & ~(kStackSpan - 1));
    s.fibers.resize(kMaxThreads);
  }
  for (unsigned t = 0; t < count; ++t) {
    Fiber& f = s.fibers[t];
    if (!f.thread) f = make_fiber(s.region + t * kStackSpan);
  }
}

// ---- blocks --------------------------------------------------------------------------------------
// Poisons the block's shared memory (static and dynamic), so that a kernel reading shared memory
// no thread of its block wrote sees NaN, not what the previous block left.
// The dynamic shared memory past the launch's shared_bytes is out of bounds, as on a GPU: under
// AddressSanitizer it is poisoned (the race checker, where on, reports it too).
void poison_shared(std::size_t dynamic_bytes) {
  sanitizers::unpoison(dynamic_arena, kMaxDynamicShared);
  sanitizers::fill_addressable(ember_sim_shared_begin, ember_sim_shared_end, kPoison);
  sanitizers::poison(dynamic_arena + dynamic_bytes, kMaxDynamicShared - dynamic_bytes);
}

std::string describe_stuck(const State& s) {
  std::ostringstream out;
  unsigned shown = 0;
  for (unsigned t = 0; t < s.threads && shown < 4; ++t) {
    if (s.status[t] == Status::exited || s.status[t] == Status::runnable) continue;
    const SimThread& th = *fiber_of(s, t).thread;
    out << (shown ? "; " : "") << "thread " << dim_text(th.thread_idx.x, th.thread_idx.y, th.thread_idx.z)
        << (s.status[t] == Status::at_barrier ? " waits at __syncthreads"
                                              : std::string(" waits in ") + op_name(s.warps[t / kWarp].kind));
    ++shown;
  }
  return out.str();
}

// Every live thread waits: all at __syncthreads (release them, unless one exited before reaching
// this barrier), or some in warp operations that can never complete (a deadlock).
void resolve(State& s) {
  bool all_at_barrier = true;
  for (unsigned t = 0; t < s.threads; ++t)
    if (s.status[t] == Status::at_warp) all_at_barrier = false;
  if (!all_at_barrier)
    fail("deadlock: every live thread of the block waits, but not all at the same point (" + describe_stuck(s) + ")");
  for (unsigned t = 0; t < s.threads; ++t) {
    if (s.status[t] != Status::exited || s.barriers_passed[t] > s.barriers_completed) continue;
    const SimThread& th = *fiber_of(s, t).thread;
    s.current = t;
    fail("divergent __syncthreads: thread " + dim_text(th.thread_idx.x, th.thread_idx.y, th.thread_idx.z) +
         " returned without reaching barrier number " + std::to_string(s.barriers_completed + 1) +
         ", which other threads of its block wait at (a barrier must be reached by every thread of the block)");
  }
  ++s.barriers_completed;
  for (unsigned t = 0; t < s.threads; ++t)
    if (s.status[t] == Status::at_barrier) {
      s.status[t] = Status::runnable;
      ++s.barriers_passed[t];
    }
}

// The order the scheduler resumes a block's threads in (the schedule's ThreadOrder, seeded).
void order_threads(State& s, ThreadOrder order, std::uint64_t seed) {
  unsigned* const o = s.thread_order;
  const unsigned n = s.threads, warps = (n + kWarp - 1) / kWarp;
  std::mt19937_64 rng(seed);
  for (unsigned t = 0; t < n; ++t) o[t] = order == ThreadOrder::descending ? n - 1 - t : t;
  if (order == ThreadOrder::interleaved) std::shuffle(o, o + n, rng);
  if (order != ThreadOrder::warps_together) return;
  // Whole warps in a shuffled order, each warp's lanes shuffled among themselves.
  std::vector<unsigned> warp_order(warps);
  for (unsigned w = 0; w < warps; ++w) warp_order[w] = w;
  std::shuffle(warp_order.begin(), warp_order.end(), rng);
  unsigned at = 0;
  for (const unsigned w : warp_order) {
    const unsigned first = at;
    for (unsigned t = w * kWarp; t < std::min(n, (w + 1) * kWarp); ++t) o[at++] = t;
    std::shuffle(o + first, o + at, rng);
  }
}

void run_block(State& s, std::uint32_t sequence) {
  for (unsigned t = 0; t < s.threads; ++t) {
    SimThread& th = *fiber_of(s, t).thread;
    const dim3 b = s.block.block_dim;
    th.thread_idx = {t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
    th.linear = t;
    th.block = &s.block;
    s.status[t] = Status::runnable;
    s.barriers_passed[t] = 0;
  }
  for (WarpOp& w : s.warps) w.arrived = 0;
  s.barriers_completed = 0;
  poison_shared(s.launch->shared_bytes);
  if constexpr (races::kEnabled) races::block_begin({sequence, s.threads, &s.current, s.barriers_passed});
  for (;;) {
    bool ran = false, live = false;
    for (unsigned i = 0; i < s.threads && !s.trapped; ++i) {
      const unsigned t = s.thread_order[i];
      if (s.status[t] != Status::runnable) continue;
      run_fiber(t);
      ran = true;
    }
    if (s.trapped) {  // as on a GPU, the whole launch stops; fibers left inside the kernel start afresh
      for (unsigned t = 0; t < s.threads; ++t)
        if (s.status[t] != Status::exited) reset_fiber(fiber_of(s, t));
      return;
    }
    for (unsigned t = 0; t < s.threads && !live; ++t) live = s.status[t] != Status::exited;
    if (!live) break;
    if (!ran) resolve(s);
  }
}

// ---- the executor thread -------------------------------------------------------------------------
struct Job {
  const KernelRun* launch;
  const Schedule* schedule;
  bool done = false;
  bool trapped = false;
};

struct Queue {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Job*> jobs;
};

Queue& queue() {
  static Queue* q = new Queue;
  return *q;
}

void run_launch(const KernelRun& launch, const Schedule& schedule) {
  State& s = state();
  const dim3 g = launch.grid, b = launch.block;
  s.threads = b.x * b.y * b.z;
  make_fibers(s.threads);
  s.launch = &launch;
  s.block.block_dim = b;
  s.block.grid_dim = g;
  s.running = true;
  s.trapped = false;
  order_threads(s, schedule.threads, schedule.seed);
  if constexpr (races::kEnabled)
    races::launch_begin(launch, schedule.blocks, s.region, kMaxThreads * kStackSpan, dynamic_arena, kMaxDynamicShared);
  std::uint32_t sequence = 0;
  for (const std::uint64_t linear : schedule.blocks) {
    const std::uint64_t gx = g.x, gy = g.y;
    s.block.block_idx = {static_cast<unsigned>(linear % gx), static_cast<unsigned>((linear / gx) % gy),
                         static_cast<unsigned>(linear / (gx * gy))};
    run_block(s, sequence++);
    if (s.trapped) break;
  }
  if constexpr (races::kEnabled) races::launch_end();
  s.running = false;
}

void executor_loop() {
  Queue& q = queue();
  for (;;) {
    Job* job;
    {
      std::unique_lock<std::mutex> lock(q.mutex);
      q.cv.wait(lock, [&] { return !q.jobs.empty(); });
      job = q.jobs.front();
      q.jobs.pop_front();
    }
    run_launch(*job->launch, *job->schedule);
    {
      std::lock_guard<std::mutex> lock(q.mutex);
      job->trapped = state().trapped;
      job->done = true;
    }
    q.cv.notify_all();
  }
}

State& running_state(const char* what) {
  State& s = state();
  if (!s.running) fail(std::string(what) + " called outside a kernel");
  return s;
}

}  // namespace

bool execute(const KernelRun& launch, const Schedule& schedule) {
  Queue& q = queue();  // made here, before the executor thread that uses it starts
  static std::once_flag started;
  std::call_once(started, [] { std::thread(executor_loop).detach(); });
  Job job{&launch, &schedule};
  std::unique_lock<std::mutex> lock(q.mutex);
  q.jobs.push_back(&job);
  q.cv.notify_all();
  q.cv.wait(lock, [&] { return job.done; });
  return !job.trapped;
}

void fail(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "ember software GPU: error: %s%s\n", message.c_str(), where().c_str());
  std::fflush(stderr);
  std::_Exit(1);  // as a sanitizer ends a run it reports on (in a debugger: break on ember_sim::fail)
}

// ---- what device code calls ----------------------------------------------------------------------
void sync_threads() {
  State& s = running_state("__syncthreads");
  s.status[s.current] = Status::at_barrier;
  switch_to_scheduler();
}

void thread_fence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if constexpr (races::kEnabled) races::fence();
}

void atomic_access(const void* address) {
  if constexpr (races::kEnabled) races::atomic(address);
}

unsigned active_mask() {
  State& s = running_state("__activemask");
  const unsigned warp = s.current / kWarp;
  unsigned mask = 0;
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    const unsigned t = warp * kWarp + lane;
    if (t < s.threads && s.status[t] != Status::exited) mask |= 1u << lane;
  }
  return mask;
}

namespace {

// The lane a shuffle reads for `lane`, or `lane` itself where CUDA returns the caller's own value.
unsigned source_lane(const WarpOp& w, unsigned lane) {
  const unsigned width = static_cast<unsigned>(w.width);
  const unsigned segment = lane - lane % width;
  const int arg = w.arg[lane];
  switch (w.kind) {
    case WarpOpKind::shfl:
      return segment + static_cast<unsigned>(arg) % width;
    case WarpOpKind::shfl_xor: {
      const unsigned target = lane ^ static_cast<unsigned>(arg);
      return target >= segment + width ? lane : target;
    }
    case WarpOpKind::shfl_down: {
      const unsigned target = lane + static_cast<unsigned>(arg);
      return target >= segment + width ? lane : target;
    }
    case WarpOpKind::shfl_up:
      return static_cast<unsigned>(arg) > lane - segment ? lane : lane - static_cast<unsigned>(arg);
    default:
      return lane;
  }
}

void complete(State& s, unsigned warp) {
  WarpOp& w = s.warps[warp];
  std::uint64_t ballot = 0;
  for (unsigned lane = 0; lane < kWarp; ++lane)
    if (w.mask >> lane & 1u && w.value[lane]) ballot |= std::uint64_t{1} << lane;
  const unsigned members = static_cast<unsigned>(__builtin_popcount(w.mask));
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    if (!(w.mask >> lane & 1u)) continue;
    std::uint64_t result = 0;
    switch (w.kind) {
      case WarpOpKind::ballot:
        result = ballot;
        break;
      case WarpOpKind::any:
        result = ballot != 0;
        break;
      case WarpOpKind::all:
        result = static_cast<unsigned>(__builtin_popcountll(ballot)) == members;
        break;
      case WarpOpKind::syncwarp:
        break;
      default: {
        const unsigned src = source_lane(w, lane);
        if (!(w.mask >> src & 1u)) {
          s.current = warp * kWarp + lane;
          fail(std::string(op_name(w.kind)) + " reads lane " + std::to_string(src) + ", which is not in the mask " +
               hex(w.mask));
        }
        result = w.value[src];
      }
    }
    const unsigned t = warp * kWarp + lane;
    fiber_of(s, t).thread->warp_result = result;
    if (s.status[t] == Status::at_warp) s.status[t] = Status::runnable;
  }
  // Only __syncwarp orders memory among its lanes; shuffles and votes exchange values.
  if constexpr (races::kEnabled)
    if (w.kind == WarpOpKind::syncwarp) races::warp_synced(warp, w.mask);
  w.arrived = 0;
}

}  // namespace

std::uint64_t warp_op(WarpOpKind kind, unsigned mask, std::uint64_t value, int arg, int width) {
  State& s = running_state(op_name(kind));
  const unsigned me = s.current, warp = me / kWarp, lane = me % kWarp;
  WarpOp& w = s.warps[warp];
  if (!(mask >> lane & 1u))
    fail(std::string(op_name(kind)) + " with mask " + hex(mask) + " is called by lane " + std::to_string(lane) +
         ", which the mask leaves out");
  if (width <= 0 || width > 32 || (width & (width - 1)))
    fail(std::string(op_name(kind)) + ": width " + std::to_string(width) + " is not a power of two up to 32");
  for (unsigned other = 0; other < kWarp; ++other) {
    if (!(mask >> other & 1u)) continue;
    const unsigned t = warp * kWarp + other;
    if (t >= s.threads)
      fail(std::string(op_name(kind)) + " with mask " + hex(mask) + " names lane " + std::to_string(other) +
           ", which does not exist: the block has " + std::to_string(s.threads) + " threads");
    if (s.status[t] == Status::exited)
      fail(std::string(op_name(kind)) + " with mask " + hex(mask) + " names lane " + std::to_string(other) +
           ", which has already exited (every lane in the mask must take part)");
  }
  if (w.arrived == 0) {
    w.kind = kind;
    w.mask = mask;
    w.width = width;
  } else if (w.kind != kind || w.mask != mask) {
    fail(std::string(op_name(kind)) + " with mask " + hex(mask) + " meets " + op_name(w.kind) + " with mask " +
         hex(w.mask) + " in the same warp: the lanes of a mask must call the same operation");
  }
  w.value[lane] = value;
  w.arg[lane] = arg;
  w.arrived |= 1u << lane;
  if ((w.arrived & mask) == mask) {
    complete(s, warp);
  } else {
    s.status[me] = Status::at_warp;
    switch_to_scheduler();
  }
  return fiber_of(s, me).thread->warp_result;
}

void trap() {
  State& s = running_state("__trap");
  s.trapped = true;
  s.status[s.current] = Status::trapped;
  switch_to_scheduler();  // never resumed: reset_fiber starts the fiber afresh
  fail("a trapped thread was resumed");
}

void* dynamic_shared_memory() {
  running_state("dynamic shared memory");
  return dynamic_arena;
}

}  // namespace ember_sim
