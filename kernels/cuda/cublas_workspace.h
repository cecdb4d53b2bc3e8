// The device memory that cuBLAS and cuBLASLt may use inside a GEMM on a stream: split-K partials,
// stream-K fix-ups. One per thread, device and stream (gemm.cpp), shared by both libraries since
// calls on one stream run one after another.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace ember::kernels::cuda {

struct GemmWorkspace {
  void* data = nullptr;
  std::size_t bytes = 0;  // 32 MiB on Hopper and later, 4 MiB before (cuBLAS's recommendation)
};

// This thread's workspace for the current device and `stream`, made at the stream's first GEMM
// (never inside a graph capture: CudaError then).
GemmWorkspace gemm_workspace(cudaStream_t stream);
// Its size on the current device, for planning a GEMM before a stream is known.
std::size_t gemm_workspace_bytes();

}  // namespace ember::kernels::cuda
