// Launch-shape helpers shared by the CUDA kernel files (device code only, never included by C++).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/common.h"

namespace ember::kernels::cuda {

constexpr unsigned kBlock = 256;
constexpr unsigned kWarp = 32;

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, capped so that the
// launch is valid for any n and each thread does a few elements when n is huge.
inline unsigned grid_for(std::size_t n, unsigned block = kBlock) {
  const std::size_t blocks = ceil_div(n, block);
  constexpr std::size_t kMaxBlocks = 65536;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ inline std::size_t global_thread() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

// The launch's dynamic shared memory (its shared_bytes) as an array of T. nvcc declares it as an
// extern __shared__ array; a host compiler compiling these sources for a runtime that runs kernels
// on the CPU cannot, and gets the storage from that runtime (cuda_host_dynamic_shared) instead.
template <class T>
__device__ T* dynamic_shared() {
#if defined(__CUDACC__)
  extern __shared__ __align__(16) unsigned char ember_dynamic_shared[];
  return reinterpret_cast<T*>(ember_dynamic_shared);
#else
  return static_cast<T*>(cuda_host_dynamic_shared());
#endif
}

__device__ inline float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Whether this block is the last of the grid to get here: for a deterministic finishing step
// (a fixed-order sum, advancing counters) without a second launch. Every thread of every block
// must call it (no early return before it). `blocks_done` counts arrivals; the last block must
// reset it to 0 before returning, so the next launch (or graph replay) starts from 0.
__device__ inline bool is_last_block(unsigned* blocks_done) {
  __shared__ bool last;
  __threadfence();  // this block's writes (and reads) are done before it counts itself
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(blocks_done, 1u) == gridDim.x * gridDim.y - 1;
  __syncthreads();
  if (last) __threadfence();  // and the other blocks' writes are seen by this one's reads after it
  return last;
}

}  // namespace ember::kernels::cuda
