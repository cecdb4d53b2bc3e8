// Launch checking shared by every CUDA launcher (Note [launching kernels] in launch.cuh).
#include <cuda_runtime.h>

#include <atomic>

#include "base/error.h"
#include "kernels/common.h"
#include "kernels/cuda/launch.cuh"

namespace ember::kernels::cuda {

namespace {
std::atomic<bool> g_sync_debug{false};
thread_local std::uint64_t t_launches = 0;
}  // namespace

std::uint64_t launches_issued() { return t_launches; }
void count_library_call() { ++t_launches; }

void set_sync_debug(bool on) { g_sync_debug = on; }
bool sync_debug() { return g_sync_debug; }

namespace {
// Faults of a kernel while it ran. They stay with the context and CUDA reports them at the next
// call, so the launch that sees one is usually not the kernel that caused it.
bool raised_by_earlier_work(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}
}  // namespace

void check_launch(const char* kernel, cudaStream_t stream) {
  ++t_launches;
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess && raised_by_earlier_work(status))
    throw CudaError(detail::concat("CUDA error: ", cudaGetErrorName(status), " (", cudaGetErrorString(status),
                                   "), reported at the launch of kernel '", kernel,
                                   "': an earlier kernel, copy or library call on this device faulted (CUDA reports "
                                   "a fault at the next call). Run again with EMBER_SYNC_DEBUG=1 to name the kernel "
                                   "that faulted: each launch then waits for its kernel"));
  if (status != cudaSuccess)
    throw CudaError(detail::concat("CUDA error: launch of kernel '", kernel, "' failed: ", cudaGetErrorName(status),
                                   " (", cudaGetErrorString(status), ")"));
  if (!sync_debug()) return;
  status = cudaStreamSynchronize(stream);
  if (status != cudaSuccess)
    throw CudaError(detail::concat("CUDA error: kernel '", kernel, "' failed while running: ", cudaGetErrorName(status),
                                   " (", cudaGetErrorString(status),
                                   ") [reported at its launch because EMBER_SYNC_DEBUG=1]"));
}

std::string readable_kernel_name(std::string_view name) {
  std::string out(name);
  constexpr std::string_view anonymous = "_GLOBAL__N__";
  for (std::size_t at = out.find(anonymous); at != std::string::npos; at = out.find(anonymous, at)) {
    std::size_t end = at + anonymous.size();
    while (end < out.size() && out[end] != ':') ++end;
    out.replace(at, end - at, "{anonymous}");
  }
  return out;
}

namespace {
__global__ void empty_kernel() {}
}  // namespace

void launch_empty(cudaStream_t stream) { launch<empty_kernel>(LaunchShape{dim3(1), dim3(1)}, stream); }

}  // namespace ember::kernels::cuda
