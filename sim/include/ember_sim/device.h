// The device side of the software GPU, as CUDA C++ sees it when a host compiler compiles it: the
// synchronization and warp intrinsics, atomics, fences and the math intrinsics a host C library lacks, and the
// template through which a launch reaches the executor (cuda_host_launch). Included by
// cuda_shim.h after the CUDA toolkit's own headers.
#pragma once

#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ember_sim {

// Each simulated thread runs on a fiber whose stack is aligned to kStackSpan; its state sits at the
// stack's lowest address, below a guard page, so the device code finds it from the stack pointer
// alone — nothing shared is read to learn "which thread am I".
inline constexpr std::size_t kStackSpan = std::size_t{1} << 20;

struct BlockInfo {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

struct SimThread {
  uint3 thread_idx;
  unsigned linear = 0;  // x + y·blockDim.x + z·blockDim.x·blockDim.y
  const BlockInfo* block = nullptr;
  // Set by the executor: the result of the last warp operation this thread took part in.
  std::uint64_t warp_result = 0;
};

inline SimThread& self() noexcept {
  std::uintptr_t sp;
#if defined(__x86_64__)
  asm volatile("mov %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
  asm volatile("mov %0, sp" : "=r"(sp));
#else
#error "the software GPU reads the stack pointer on x86-64 and AArch64 only"
#endif
  return *reinterpret_cast<SimThread*>(sp & ~(kStackSpan - 1));
}

// ---- what the executor provides (sim/src/executor.cpp) -----------------------------------------
enum class WarpOpKind : int { shfl, shfl_xor, shfl_down, shfl_up, ballot, any, all, syncwarp };
void sync_threads();
std::uint64_t warp_op(WarpOpKind kind, unsigned mask, std::uint64_t value, int arg, int width);
unsigned active_mask();
[[noreturn]] void trap();
void* dynamic_shared_memory();
void thread_fence();                      // __threadfence: a fence the race checker sees
void atomic_access(const void* address);  // before each atomic: the race checker's fence model

// ---- a launch, as the executor receives it -----------------------------------------------------
// A pointer argument of the kernel: where it points and whether the kernel may write through it
// (a pointer to non-const). The runtime checks these against its allocations.
struct PointerArg {
  const void* address;
  bool writable;
  int index;  // the argument's position
};

// Memory a kernel reaches through pointers stored in memory (a table of slots) rather than passed
// as arguments: its launcher declares each range before the launch (kernels/cuda/launch.cuh's
// launch_reaching), and the launch's stream-ordering checks take them with its arguments.
struct ReachedRange {
  const void* address;
  std::size_t bytes;
  bool writable;
};
void note_reached(const ReachedRange& range);  // for the next launch from this host thread

struct LaunchRequest {
  std::string kernel;              // the kernel's name, for every message
  const void* function = nullptr;  // its address (for cudaFuncSetAttribute limits)
  dim3 grid, block;
  std::size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
  std::vector<PointerArg> pointers;
  void (*run)(const void* args) = nullptr;  // calls the kernel with the stored arguments
  std::shared_ptr<void> args;               // the arguments, converted to the kernel's parameters
};

// Validates and enqueues the launch; errors are returned as a CUDA launch would (cudaGetLastError).
cudaError_t enqueue_launch(LaunchRequest request);

template <auto Kernel>
std::string function_name() {
  const std::string pretty = __PRETTY_FUNCTION__;
  const std::size_t at = pretty.find("Kernel = ") + 9;
  std::string name = pretty.substr(at, pretty.find_first_of(";]", at) - at);
  return name.rfind('&', 0) == 0 ? name.substr(1) : name;
}

template <class T>
void note_pointer(std::vector<PointerArg>& out, const T& value, int index) {
  if constexpr (std::is_pointer_v<T>) {
    using Pointee = std::remove_pointer_t<T>;
    if (value) out.push_back({static_cast<const void*>(value), !std::is_const_v<Pointee>, index});
  }
}

template <class Params, std::size_t... I>
void note_pointers(std::vector<PointerArg>& out, const Params& params, std::index_sequence<I...>) {
  (note_pointer(out, std::get<I>(params), static_cast<int>(I)), ...);
}

template <class F>
struct KernelTraits;
template <class... P>
struct KernelTraits<void (*)(P...)> {
  using Params = std::tuple<std::decay_t<P>...>;
};

}  // namespace ember_sim

// The launch a CUDA runtime that runs kernels on the CPU offers a host compiler in place of
// <<<...>>> (kernels/cuda/launch.cuh uses it): the kernel is a template argument, so its
// parameter types are known here and its arguments are converted to them once.
template <auto Kernel, class... Args>
void cuda_host_launch(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, const Args&... args) {
  using Params = typename ember_sim::KernelTraits<decltype(Kernel)>::Params;
  auto stored = std::make_shared<Params>(args...);
  ember_sim::LaunchRequest r;
  r.kernel = ember_sim::function_name<Kernel>();
  r.function = reinterpret_cast<const void*>(Kernel);
  r.grid = grid;
  r.block = block;
  r.shared_bytes = shared_bytes;
  r.stream = stream;
  ember_sim::note_pointers(r.pointers, *stored, std::make_index_sequence<std::tuple_size_v<Params>>{});
  r.run = [](const void* p) { std::apply(Kernel, *static_cast<const Params*>(p)); };
  r.args = std::move(stored);
  ember_sim::enqueue_launch(std::move(r));  // an error is left for cudaGetLastError, as CUDA does
}

// Memory the next launch from this thread reaches through pointers stored in memory, for the
// stream-ordering checks (kernels/cuda/launch.cuh's launch_reaching declares it).
inline void cuda_host_note_reached(const void* address, std::size_t bytes, bool writable) {
  ember_sim::note_reached({address, bytes, writable});
}

// Dynamic shared memory (the launch's shared_bytes), which CUDA C++ declares as an `extern
// __shared__` array — a declaration a host compiler cannot give block-wide storage. Reached
// through kernels/cuda/grid.cuh's dynamic_shared<T>().
inline void* cuda_host_dynamic_shared() { return ember_sim::dynamic_shared_memory(); }

// ---- synchronization ---------------------------------------------------------------------------
inline void __syncthreads() { ember_sim::sync_threads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ember_sim::warp_op(ember_sim::WarpOpKind::syncwarp, mask, 0, 0, 32);
}
inline unsigned __activemask() { return ember_sim::active_mask(); }
inline void __threadfence() { ember_sim::thread_fence(); }
// Orders only within the block, where barriers already order everything the checker compares.
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { ember_sim::thread_fence(); }
[[noreturn]] inline void __trap() { ember_sim::trap(); }

// ---- warp shuffles and votes (values of up to 8 bytes) ----------------------------------------
namespace ember_sim {
template <class T>
T shuffle(WarpOpKind kind, unsigned mask, T value, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move values of up to 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = warp_op(kind, mask, bits, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace ember_sim

template <class T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32) {
  return ember_sim::shuffle(ember_sim::WarpOpKind::shfl, mask, value, src_lane, width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  return ember_sim::shuffle(ember_sim::WarpOpKind::shfl_xor, mask, value, lane_mask, width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  return ember_sim::shuffle(ember_sim::WarpOpKind::shfl_down, mask, value, static_cast<int>(delta), width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  return ember_sim::shuffle(ember_sim::WarpOpKind::shfl_up, mask, value, static_cast<int>(delta), width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(ember_sim::warp_op(ember_sim::WarpOpKind::ballot, mask, predicate != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(ember_sim::warp_op(ember_sim::WarpOpKind::any, mask, predicate != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(ember_sim::warp_op(ember_sim::WarpOpKind::all, mask, predicate != 0, 0, 32));
}

// ---- atomics: relaxed, as CUDA's are (fences order them) ---------------------------------------
// Each tells the race checker first, and is not traced as loads and stores (the loads inside a
// compare-and-swap loop, or an exchange whose result is unused turned into an atomic store, are
// the atomic's own): EMBER_SIM_ATOMIC. Not inlined, or the caller's tracing would reach them.
#define EMBER_SIM_ATOMIC __attribute__((no_sanitize("coverage"), noinline)) inline
template <class T>
EMBER_SIM_ATOMIC T ember_sim_atomic_add(T* address, T value) {
  ember_sim::atomic_access(address);
  if constexpr (std::is_floating_point_v<T>) {
    T old, desired;
    __atomic_load(address, &old, __ATOMIC_RELAXED);
    do {
      desired = old + value;
    } while (!__atomic_compare_exchange(address, &old, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
  } else {
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
  }
}
inline int atomicAdd(int* a, int v) { return ember_sim_atomic_add(a, v); }
inline unsigned atomicAdd(unsigned* a, unsigned v) { return ember_sim_atomic_add(a, v); }
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) { return ember_sim_atomic_add(a, v); }
inline float atomicAdd(float* a, float v) { return ember_sim_atomic_add(a, v); }
inline double atomicAdd(double* a, double v) { return ember_sim_atomic_add(a, v); }
template <class T>
EMBER_SIM_ATOMIC T ember_sim_atomic_sub(T* address, T value) {
  ember_sim::atomic_access(address);
  return __atomic_fetch_sub(address, value, __ATOMIC_RELAXED);
}
inline int atomicSub(int* a, int v) { return ember_sim_atomic_sub(a, v); }
inline unsigned atomicSub(unsigned* a, unsigned v) { return ember_sim_atomic_sub(a, v); }
template <class T>
EMBER_SIM_ATOMIC T ember_sim_atomic_cas(T* address, T compare, T value) {
  ember_sim::atomic_access(address);
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
inline int atomicCAS(int* a, int c, int v) { return ember_sim_atomic_cas(a, c, v); }
inline unsigned atomicCAS(unsigned* a, unsigned c, unsigned v) { return ember_sim_atomic_cas(a, c, v); }
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long c, unsigned long long v) {
  return ember_sim_atomic_cas(a, c, v);
}
template <class T>
EMBER_SIM_ATOMIC T ember_sim_atomic_exch(T* address, T value) {
  ember_sim::atomic_access(address);
  T old;
  __atomic_exchange(address, &value, &old, __ATOMIC_RELAXED);
  return old;
}
inline int atomicExch(int* a, int v) { return ember_sim_atomic_exch(a, v); }
inline unsigned atomicExch(unsigned* a, unsigned v) { return ember_sim_atomic_exch(a, v); }
inline unsigned long long atomicExch(unsigned long long* a, unsigned long long v) {
  return ember_sim_atomic_exch(a, v);
}
inline float atomicExch(float* a, float v) { return ember_sim_atomic_exch(a, v); }
template <class T>
EMBER_SIM_ATOMIC T ember_sim_atomic_minmax(T* address, T value, bool want_max) {
  ember_sim::atomic_access(address);
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while ((want_max ? value > old : value < old) &&
         !__atomic_compare_exchange_n(address, &old, value, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
inline int atomicMax(int* a, int v) { return ember_sim_atomic_minmax(a, v, true); }
inline unsigned atomicMax(unsigned* a, unsigned v) { return ember_sim_atomic_minmax(a, v, true); }
inline unsigned long long atomicMax(unsigned long long* a, unsigned long long v) {
  return ember_sim_atomic_minmax(a, v, true);
}
inline long long atomicMax(long long* a, long long v) { return ember_sim_atomic_minmax(a, v, true); }
inline int atomicMin(int* a, int v) { return ember_sim_atomic_minmax(a, v, false); }
inline unsigned atomicMin(unsigned* a, unsigned v) { return ember_sim_atomic_minmax(a, v, false); }
inline unsigned long long atomicMin(unsigned long long* a, unsigned long long v) {
  return ember_sim_atomic_minmax(a, v, false);
}
inline long long atomicMin(long long* a, long long v) { return ember_sim_atomic_minmax(a, v, false); }
#undef EMBER_SIM_ATOMIC

// ---- math the host C library lacks, and the device's fast variants (exact here) ---------------
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned i) { return std::bit_cast<float>(i); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(static_cast<unsigned>(x)) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T>
T __ldg(const T* p) {
  return *p;
}
using std::isfinite;
using std::isinf;
using std::isnan;
