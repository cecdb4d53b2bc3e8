// Launch checking shared by every CUDA launcher.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/common.h"

namespace ember::kernels::cuda {

bool sync_debug() {
  static const bool enabled = [] {
    const char* value = std::getenv("EMBER_SYNC_DEBUG");
    return value != nullptr && std::strcmp(value, "0") != 0 && value[0] != '\0';
  }();
  return enabled;
}

void check_launch(const char* kernel, cudaStream_t stream) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw CudaError(detail::concat("CUDA error: launch of kernel '", kernel, "' failed: ",
                                   cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"));
  if (!sync_debug()) return;
  status = cudaStreamSynchronize(stream);
  if (status != cudaSuccess)
    throw CudaError(detail::concat("CUDA error: kernel '", kernel, "' failed while running: ",
                                   cudaGetErrorName(status), " (", cudaGetErrorString(status),
                                   ") [reported at its launch because EMBER_SYNC_DEBUG=1]"));
}

namespace {
__global__ void empty_kernel() {}
}  // namespace

void launch_empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  check_launch("empty_kernel", stream);
}

}  // namespace ember::kernels::cuda
