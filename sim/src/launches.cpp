// Kernel launches: the checks of a launch (its configuration, its arguments' devices), the ranges
// its launcher declares, its run under one or more schedules, and cudaFuncSetAttribute.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ember_sim/device.h"
#include "executor.h"
#include "races.h"
#include "state.h"

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
  note_context_use(t_device);
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

using namespace ember_sim::rt;

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || value > 227 * 1024) return record_error(cudaErrorInvalidValue);
  rt.max_dynamic_shared[func] = value;
  return cudaSuccess;
}
