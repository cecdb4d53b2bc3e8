// Forced into every CUDA source the software GPU compiles (clang -include): what a host compiler
// lacks to compile CUDA C++. The execution-space qualifiers are defined here, before the CUDA
// toolkit's headers, which would otherwise define them away — `__shared__` as nothing would make
// a block's shared array a per-thread local. `__shared__` variables go to one linker section, the
// block's shared memory, which sim/src/shared_memory.ld puts on pages of its own; the executor
// poisons it between blocks (one block runs at a time, so one copy suffices). The section's name
// starts with a dot: AddressSanitizer leaves globals in sections named like C identifiers
// uninstrumented, and instruments these, with redzones between the arrays.
#pragma once

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __shared__ static __attribute__((section(".ember_sim_shared"), aligned(16)))
#define __constant__ static
#define __managed__
#define __grid_constant__
// The built-in variables are ember_sim's (device.h); keep the toolkit's declarations out.
#define __DEVICE_LAUNCH_PARAMETERS_H__

#include <cuda_runtime.h>

#include "ember_sim/device.h"

// The built-in variables. The four that differ per thread or block are macros that ask the fiber
// running now (only the CUDA sources, which get this file forced in, see them); warpSize is a
// constant, not a macro, so that host code's prop.warpSize still names the member.
#define threadIdx (::ember_sim::self().thread_idx)
#define blockIdx (::ember_sim::self().block->block_idx)
#define blockDim (::ember_sim::self().block->block_dim)
#define gridDim (::ember_sim::self().block->grid_dim)
inline constexpr int warpSize = 32;
