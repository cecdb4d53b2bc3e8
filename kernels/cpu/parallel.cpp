// The CPU thread pool (Note [CPU threads] in kernels/parallel.h).
#include "kernels/parallel.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/config.h"
#include "kernels/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define EMBER_CPU_RELAX() _mm_pause()
#else
#define EMBER_CPU_RELAX() std::this_thread::yield()
#endif

namespace ember::kernels::cpu {

namespace {

thread_local bool inside_part = false;

// How long a waiting thread polls before it sleeps on a futex. Waking a sleeping thread took
// 30–250 µs here (a VM: the idle virtual CPU is halted), and a hand-over whose wake outlasts the
// other side's polling makes both sides sleep at every loop: with ~100 µs of polling, back-to-back
// loops of 4K–512K elements settled at ~230 µs each instead of 0.4–40 (bench_kernels --filter
// parallel_split). OpenMP runtimes poll longer still (libgomp about 0.3 ms, Intel's 200 ms).
constexpr auto kPolling = std::chrono::milliseconds(1);

template <class T>
void wait_while_equal(const std::atomic<T>& value, T old) {
  const auto until = std::chrono::steady_clock::now() + kPolling;
  for (unsigned i = 1;; ++i) {
    if (value.load(std::memory_order_acquire) != old) return;
    EMBER_CPU_RELAX();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) break;  // the clock every 64 pauses
  }
  while (value.load(std::memory_order_acquire) == old) value.wait(old, std::memory_order_acquire);
}

class Pool {
 public:
  explicit Pool(int threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
  }
  ~Pool() {
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (std::thread& w : workers_) w.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void run(std::size_t parts, PartsFunction body, void* context) {
    job_ = {parts, body, context};
    error_ = nullptr;
    remaining_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    run_share(0);
    for (int left = remaining_.load(std::memory_order_acquire); left != 0;
         left = remaining_.load(std::memory_order_acquire))
      wait_while_equal(remaining_, left);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct Job {
    std::size_t parts = 0;
    PartsFunction body = nullptr;
    void* context = nullptr;
  };

  // Thread t's run of parts: the t-th of threads() contiguous runs, the first ones a part longer.
  void run_share(int t) {
    const std::size_t n = static_cast<std::size_t>(threads()), base = job_.parts / n, extra = job_.parts % n;
    const std::size_t i = static_cast<std::size_t>(t);
    const std::size_t first = i * base + (i < extra ? i : extra), last = first + base + (i < extra ? 1 : 0);
    if (first == last) return;
    inside_part = true;
    try {
      job_.body(job_.context, first, last);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    inside_part = false;
  }

  void work(int t) {
    const std::string name = "ember-cpu-" + std::to_string(t);
    pthread_setname_np(pthread_self(), name.c_str());
    std::uint64_t seen = 0;
    for (;;) {
      wait_while_equal(generation_, seen);
      seen = generation_.load(std::memory_order_acquire);
      if (stop_) return;
      run_share(t);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  Job job_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

int threads_from_environment() {
  const char* text = std::getenv("EMBER_NUM_THREADS");
  const int n = text ? std::atoi(text) : 0;
  return n > 0 ? n : 1;
}

// The pool and the lock that keeps two callers from using (or resizing) it at once: ember's
// kernels may be called from several application threads; the second waits for the first's loop.
std::mutex pool_mutex;
std::unique_ptr<Pool> pool;
std::atomic<int> configured{0};

Pool& pool_locked() {
  if (!pool) {
    pool = std::make_unique<Pool>(compute_threads());
  }
  return *pool;
}

}  // namespace

void set_compute_threads(int threads) {
  if (threads < 1) return;
  std::lock_guard<std::mutex> lock(pool_mutex);
  hold_library_threads();
  if (pool && pool->threads() == threads) return;
  pool.reset();
  configured.store(threads);
}

int compute_threads() {
  const int n = configured.load(std::memory_order_relaxed);
  if (n > 0) return n;
  static const int from_environment = threads_from_environment();  // read once, not per loop
  return from_environment;
}

bool in_parallel_region() { return inside_part; }

void* thread_scratch(std::size_t slot, std::size_t bytes) {
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    std::size_t size = 0;
  };
  thread_local Buffer buffers[kScratchSlots];
  Buffer& b = buffers[slot];
  constexpr std::size_t kAlign = 64;
  if (b.size < bytes) {
    b.data = std::make_unique_for_overwrite<std::byte[]>(bytes + kAlign);
    b.size = bytes;
  }
  const auto address = reinterpret_cast<std::uintptr_t>(b.data.get());
  return b.data.get() + (kAlign - address % kAlign) % kAlign;
}

void run_parts(std::size_t parts, PartsFunction body, void* context) {
  if (parts == 0) return;
  if (parts == 1 || inside_part || compute_threads() == 1) {
    body(context, 0, parts);
    return;
  }
  std::lock_guard<std::mutex> lock(pool_mutex);
  hold_library_threads();
  pool_locked().run(parts, body, context);
}

}  // namespace ember::kernels::cpu
