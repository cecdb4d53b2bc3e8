// The race checker: the simulator's own detector of data races inside a launch, by CUDA's rules.
// Every load and store of the simulated sources reaches it (clang's -fsanitize-coverage=
// trace-loads,trace-stores hooks, in builds with EMBER_SIM_RACES); it keeps, per 4-byte word of
// device, pinned and shared memory, the last write and two reads since, and reports two accesses
// of different threads, one of them a write, that CUDA does not order (and an access past the
// launch's dynamic shared memory):
//   - threads of one block: ordered by __syncthreads (the barrier interval each access was in),
//     and lanes of one warp also by a __syncwarp both took part in; shuffles and votes exchange
//     values but order no memory, as in CUDA;
//   - threads of different blocks of the launch: ordered only by fence → atomic → fence, i.e. a
//     __threadfence after the first access (by its thread, or by a thread of its block after a
//     barrier), an atomic after that fence, an atomic of the second block on the same address
//     after it, and a __threadfence after that observation before the second access (again by
//     its thread, or by a thread of its block before a barrier);
//   - launches: ordered by stream order; what streams share is the runtime's check (checks.cpp).
// Atomics are not compared with each other or with plain accesses. See docs/simulator.md for
// what it covers and what it does not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "executor.h"

namespace ember_sim::races {

#if defined(EMBER_SIM_RACES)
inline constexpr bool kEnabled = true;
#else
inline constexpr bool kEnabled = false;
#endif

// What the executor shows the checker of the block running now (its own arrays, read in place).
struct BlockView {
  std::uint32_t sequence = 0;                 // the block's position in the launch's order
  unsigned threads = 0;                       // in the block
  const unsigned* current = nullptr;          // the thread running now
  const unsigned* barriers_passed = nullptr;  // per thread: its barrier interval
};

// All called on the executor's thread, in this order: launch_begin, then per block block_begin,
// the threads' accesses, fences, atomics and completed __syncwarps, then launch_end.
void launch_begin(const KernelRun& launch, const std::vector<std::uint64_t>& block_order, const char* stacks,
                  std::size_t stacks_bytes, const unsigned char* dynamic_arena, std::size_t arena_bytes);
void block_begin(const BlockView& block);
void warp_synced(unsigned warp, unsigned mask);  // a __syncwarp completed with this mask
void launch_end();

// From device code (device.h, through the executor): a __threadfence (or __threadfence_system)
// by the thread running now, and an atomic read-modify-write of `address`.
void fence();
void atomic(const void* address);

}  // namespace ember_sim::races
