// Device parsing, printing, selection and the "is it usable" check.
#include "core/tensor/device.h"

#include <string>

#include "core/base/env.h"
#include "core/base/error.h"
#include "core/cuda/runtime.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ember {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    int index = 0;
    for (char c : text.substr(5)) {
      if (c < '0' || c > '9' || index > 100000) {
        index = -1;
        break;
      }
      index = index * 10 + (c - '0');
    }
    if (index >= 0) return cuda(index);
  }
  throw ValueError(detail::concat("invalid device '", text, "': expected 'cpu', 'cuda' or 'cuda:N' (N = 0, 1, ...)"));
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : detail::concat("cuda:", index); }

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

void require_usable(const Device& device) {
  if (device.is_cpu()) return;
  if (!cuda::is_available())
    throw DeviceError(detail::concat("cannot use ", device, ": ", cuda::unavailable_reason(),
                                     ". Use Device::best() to fall back to the CPU, or pass --device cpu"));
  if (device.index < 0 || device.index >= cuda::device_count())
    throw DeviceError(detail::concat("cannot use ", device, ": only ", cuda::device_count(),
                                     " CUDA device(s) found (cuda:0 to cuda:", cuda::device_count() - 1, ")"));
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
