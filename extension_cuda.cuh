// ember's extension API on the device side, for a project's own .cu files (compiled with ember's
// flags by ember_add_extension, cmake/emberExtension.cmake):
//   ember::kernels::cuda::launch<kernel>(LaunchShape{grid, block, shared}, stream, args...)
//   ember::kernels::cuda::launch_n<kernel>(n, stream, args...)     a grid-stride loop over n
//   ember::kernels::cuda::global_thread(), grid_stride(), kBlock, kWarp, warp_sum, warp_max
// Every launch is checked and named after its kernel (Note [launching kernels] in
// kernels/cuda/launch.cuh); EMBER_SYNC_DEBUG=1 reports a failing kernel at its launch.
#pragma once

#include "extension_version.h"
#include "kernels/common.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/launch.cuh"
