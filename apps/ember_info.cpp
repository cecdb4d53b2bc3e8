// ember_info: which device ember would compute on and why, and a host↔device round trip on it.
// The quickest way to see whether a machine's CUDA set-up works with ember.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <vector>

#include "apps/common/program.h"
#include "base/config.h"
#include "core/cuda/runtime.h"
#include "core/ops/ops.h"
#include "core/tensor/device.h"
#include "core/tensor/tensor.h"

int main(int argc, char** argv) {
  CLI::App app{"ember_info: show the device ember computes on, and check it with a round trip"};
  std::string device_text = "auto";
  app.add_option("--device", device_text, "auto, cpu, cuda or cuda:N")->capture_default_str();
  return ember::apps::run_cli(app, argc, argv, [&] {
    std::cout << "ember " << EMBER_VERSION << " (CUDA backend: " << (ember::cuda::built_with_cuda() ? "yes" : "no")
              << ", CPU GEMM: " << ember::cpu_gemm_library() << ")\n";
    std::cout << "CPU GEMM kernels: " << ember::cpu_gemm_kernels() << "\n";
    std::cout << "CUDA devices: " << ember::cuda::device_count();
    if (!ember::cuda::is_available()) std::cout << " (" << ember::cuda::unavailable_reason() << ")";
    std::cout << "\n";
    for (int i = 0; i < ember::cuda::device_count(); ++i)
      std::cout << "  cuda:" << i << ": " << ember::cuda::device_description(i) << "\n";
    std::string reason;
    const ember::Device device = ember::apps::choose_device("--device", device_text, reason);
    std::cout << "device: " << (device_text == "auto" ? reason : device.str()) << "\n";

    // Round trip: host → device → compute → host, and compare with the same computation on the host.
    const ember::Tensor host = ember::arange(1000).reshape({10, 100});
    const ember::Tensor on_device = host.to(device);
    const ember::Tensor result = ember::sum(ember::relu(on_device - 500.0)).cpu();
    const double expected = ember::sum(ember::relu(host - 500.0)).item<double>();
    const bool same_data = on_device.cpu().to_vector<float>() == host.to_vector<float>();
    std::cout << "round trip " << (same_data ? "ok" : "FAILED") << "; sum(relu(x - 500)) = " << result.item<double>()
              << " (expected " << expected << ")\n";
    return same_data && result.item<double>() == expected ? 0 : 1;
  });
}
