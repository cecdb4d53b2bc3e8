// The executor: runs one kernel launch at a time — its blocks one after another in a shuffled
// order, each block's threads as fibers with real barrier and warp semantics — and reports a
// broken kernel (a divergent barrier, a warp operation with an exited lane, ...) naming the
// kernel, the block and the thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember_sim/device.h"

namespace ember_sim {

struct KernelRun {
  std::string kernel;
  dim3 grid, block;
  std::size_t shared_bytes = 0;
  void (*run)(const void* args) = nullptr;
  const void* args = nullptr;
};

// Runs every block of `launch` in the order given (block indices linearized x-fastest), on the
// executor's own thread; returns when all have finished: true, or false when a thread called
// __trap() and the launch stopped there (the runtime then makes the device's error sticky).
bool execute(const KernelRun& launch, const std::vector<std::uint64_t>& block_order);

// Prints "ember software GPU: error: <message>" with the kernel, block and thread running now (if
// any) and ends the process with status 1, as a sanitizer does: a broken kernel or call is a bug
// to fix, not an error for the program to recover from.
[[noreturn]] void fail(const std::string& message);

// "0x1f": masks and addresses in messages.
std::string hex(std::uint64_t value);

}  // namespace ember_sim
