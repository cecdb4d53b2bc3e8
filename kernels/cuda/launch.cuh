// The one way ember's CUDA code launches a kernel (device code only, never included by C++).
//
// Note [launching kernels]
// launch<kernel>(shape, stream, args...) launches `kernel` with the launch shape on `stream` and
// checks the launch, naming the kernel from the kernel itself (function_name<kernel>()), so the
// name in an error cannot drift from the kernel it reports. launch_n<kernel>(n, stream, args...)
// is the same for a grid-stride loop over n elements: nothing at all for n == 0 (a grid of zero
// blocks is an error in CUDA), else enough blocks to fill the GPU (grid_for). The kernel is a
// template argument, so a kernel template is named with its arguments written out:
// launch_n<map_kernel<Op>>(...). Under nvcc the launch is `kernel<<<...>>>(args...)`; a host
// compiler compiling these sources for a CUDA runtime that runs kernels on the CPU gets
// cuda_host_launch<kernel>(...) from that runtime's headers instead. With EMBER_SYNC_DEBUG=1 the
// check also synchronizes, so an error inside the kernel is reported here, at its cause.
//
// launch_reaching<kernel>(shape, reached, stream, args...) is launch() for a kernel that also
// reaches memory through pointers stored in memory — a table of slots — rather than passed as
// arguments. `reached` is a callable returning those ranges (a std::vector<Reached>). Nothing on a
// GPU needs them, so under nvcc it is never called (no work, no allocation in a training step); a
// CUDA runtime that runs kernels on the CPU checks stream order per allocation and sees a launch's
// arguments only, so there the launcher names the rest.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "kernels/common.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/kernel_name.h"

namespace ember::kernels::cuda {

struct LaunchShape {
  dim3 grid;
  dim3 block = dim3(kBlock);
  std::size_t shared_bytes = 0;
};

// The kernel's name for messages; nvcc's host pass spells anonymous namespaces _GLOBAL__N__<hash>.
std::string readable_kernel_name(std::string_view name);

template <auto Kernel>
const char* kernel_name() {
  static const std::string name = readable_kernel_name(function_name<Kernel>());
  return name.c_str();
}

template <auto Kernel, class... Args>
void launch(const LaunchShape& shape, cudaStream_t stream, const Args&... args) {
#if defined(__CUDACC__)
  Kernel<<<shape.grid, shape.block, shape.shared_bytes, stream>>>(args...);
#else
  cuda_host_launch<Kernel>(shape.grid, shape.block, shape.shared_bytes, stream, args...);
#endif
  check_launch(kernel_name<Kernel>(), stream);
}

// A range of memory a kernel reaches through a stored pointer, and whether it may write there.
struct Reached {
  const void* address;
  std::size_t bytes;
  bool writable;
};

template <auto Kernel, class Ranges, class... Args>
void launch_reaching(const LaunchShape& shape, const Ranges& reached, cudaStream_t stream, const Args&... args) {
#if !defined(__CUDACC__)
  for (const Reached& r : reached()) cuda_host_note_reached(r.address, r.bytes, r.writable);
#else
  (void)reached;
#endif
  launch<Kernel>(shape, stream, args...);
}

template <auto Kernel, class... Args>
void launch_n(std::size_t n, cudaStream_t stream, const Args&... args) {
  if (n == 0) return;
  launch<Kernel>(LaunchShape{dim3(grid_for(n))}, stream, args...);
}

}  // namespace ember::kernels::cuda
