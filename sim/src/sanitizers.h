// The sanitizers' fiber and synchronization hooks, or nothing in a build without them: fibers
// switch stacks behind the sanitizers' backs unless told. ThreadSanitizer watches the host's
// threads only: each fiber ignores its own accesses, which the race checker (races.h) checks by
// CUDA's rules instead. EMBER_SIM_ASAN and EMBER_SIM_TSAN come from the build
// (sim/CMakeLists.txt): the executor itself is compiled without ThreadSanitizer's
// instrumentation, since its own bookkeeping is shared by the fibers.
#pragma once

#include <cstddef>
#include <cstring>

#if defined(EMBER_SIM_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(EMBER_SIM_TSAN)
#include <sanitizer/tsan_interface.h>
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace ember_sim::sanitizers {

inline void start_switch([[maybe_unused]] void** fake_stack, [[maybe_unused]] const void* bottom,
                         [[maybe_unused]] std::size_t size) {
#if defined(EMBER_SIM_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#endif
}
inline void finish_switch([[maybe_unused]] void* fake_stack, [[maybe_unused]] const void** old_bottom,
                          [[maybe_unused]] std::size_t* old_size) {
#if defined(EMBER_SIM_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, old_bottom, old_size);
#endif
}

// Marks bytes as not to be touched (AddressSanitizer reports "use-after-poison"), or touchable again.
inline void poison([[maybe_unused]] const void* begin, [[maybe_unused]] std::size_t bytes) {
#if defined(EMBER_SIM_ASAN)
  __asan_poison_memory_region(begin, bytes);
#endif
}
inline void unpoison([[maybe_unused]] const void* begin, [[maybe_unused]] std::size_t bytes) {
#if defined(EMBER_SIM_ASAN)
  __asan_unpoison_memory_region(begin, bytes);
#endif
}

// Fills [begin, end) with `byte`, except what AddressSanitizer has poisoned: the redzones it puts
// between the shared-memory arrays.
inline void fill_addressable(char* begin, char* end, unsigned char byte) {
#if defined(EMBER_SIM_ASAN)
  for (char* p = begin; p < end;) {
    auto* bad = static_cast<char*>(__asan_region_is_poisoned(p, static_cast<std::size_t>(end - p)));
    std::memset(p, byte, static_cast<std::size_t>((bad ? bad : end) - p));
    if (!bad) return;
    for (p = bad; p < end && __asan_address_is_poisoned(p);) ++p;
  }
#else
  std::memset(begin, byte, static_cast<std::size_t>(end - begin));
#endif
}

inline void* tsan_current_fiber() {
#if defined(EMBER_SIM_TSAN)
  return __tsan_get_current_fiber();
#else
  return nullptr;
#endif
}
inline void* tsan_create_fiber() {
#if defined(EMBER_SIM_TSAN)
  return __tsan_create_fiber(0);
#else
  return nullptr;
#endif
}
// Switches without a happens-before edge: the simulated threads are ordered only where CUDA
// orders them.
inline void tsan_switch([[maybe_unused]] void* fiber) {
#if defined(EMBER_SIM_TSAN)
  __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
#endif
}
// Accesses the sanitizer should not record: a fiber's, which the race checker watches instead.
inline void ignore_accesses_begin() {
#if defined(EMBER_SIM_TSAN)
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
}
inline void ignore_accesses_end() {
#if defined(EMBER_SIM_TSAN)
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}

}  // namespace ember_sim::sanitizers
