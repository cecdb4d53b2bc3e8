// The executor: runs one kernel launch at a time — its blocks one after another in a shuffled
// order, each block's threads as fibers with real barrier and warp semantics — and reports a
// broken kernel (a divergent barrier, a warp operation with an exited lane, ...) naming the
// kernel, the block and the thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ember_sim/device.h"

namespace ember_sim {

struct KernelRun {
  std::string kernel;
  dim3 grid, block;
  std::size_t shared_bytes = 0;
  void (*run)(const void* args) = nullptr;
  const void* args = nullptr;
  // Every allocation (device and pinned) when the launch runs, as (base, bytes): the memory the
  // race checker watches (races.h). Filled only in builds that have it.
  std::vector<std::pair<const char*, std::size_t>> memory;
};

// The order in which the scheduler resumes a block's threads, each until it waits or exits. A
// kernel whose result depends on it reads what another thread wrote without a barrier between.
enum class ThreadOrder {
  ascending,
  descending,
  warps_together,  // whole warps in a shuffled order, each warp's lanes shuffled
  interleaved,     // every thread shuffled: warps interleave
};

// One run of a launch: its blocks in this order (indices linearized x-fastest), one after
// another, and every block's threads in this thread order (shuffles seeded by `seed`).
struct Schedule {
  std::vector<std::uint64_t> blocks;
  ThreadOrder threads = ThreadOrder::ascending;
  std::uint64_t seed = 0;
};

// Runs every block of `launch` under `schedule`, on the executor's own thread; returns when all
// have finished: true, or false when a thread called __trap() and the launch stopped there (the
// runtime then makes the device's error sticky).
bool execute(const KernelRun& launch, const Schedule& schedule);

// Prints "ember software GPU: error: <message>" with the kernel, block and thread running now (if
// any) and ends the process with status 1, as a sanitizer does: a broken kernel or call is a bug
// to fix, not an error for the program to recover from.
[[noreturn]] void fail(const std::string& message);

// "0x1f": masks and addresses in messages.
std::string hex(std::uint64_t value);

}  // namespace ember_sim
