// Device selection, the "is it usable" check and the CPU's compute threads.
#include "core/tensor/device.h"

#include <string>

#include "base/env.h"
#include "base/error.h"
#include "core/cuda/runtime.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ember {

void require_usable(const Device& device) {
  if (device.is_cuda()) cuda::require_usable_device(device);
}

namespace {
std::optional<std::string> env_device() { return env_value("EMBER_DEVICE"); }
}  // namespace

Device Device::best() {
  if (const std::optional<std::string> forced = env_device()) {
    Device device = parse(*forced);
    require_usable(device);
    return device;
  }
  return cuda::is_available() ? cuda(0) : cpu();
}

std::string Device::best_reason() {
  const Device device = best();
  if (env_device()) return detail::concat(device, " (set by EMBER_DEVICE)");
  if (device.is_cuda()) return detail::concat(device, " (", cuda::device_description(device.index), ")");
  return detail::concat("cpu (no CUDA device: ", cuda::unavailable_reason(), ")");
}

void set_num_threads(int threads) { kernels::cpu::set_compute_threads(threads); }
int num_threads() { return kernels::cpu::compute_threads(); }
const char* cpu_gemm_library() { return kernels::cpu::blas_name(); }
std::string cpu_gemm_kernels() { return kernels::cpu::gemm_kernels(); }
double cpu_gemm_seconds() { return kernels::cpu::gemm_seconds(); }

}  // namespace ember
