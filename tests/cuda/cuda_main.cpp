// Main of the GPU test binary: where no CUDA device is usable it says why and exits 77, which
// CTest reports as skipped (SKIP_RETURN_CODE). Catch2 v2 has no SKIP macro, hence this main.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "core/cuda/runtime.h"

int main(int argc, char** argv) {
  if (!ember::cuda::is_available()) {
    std::printf("test_cuda: skipped: no usable CUDA device (%s)\n", ember::cuda::unavailable_reason().c_str());
    return 77;
  }
  std::printf("test_cuda: running on cuda:0: %s\n", ember::cuda::device_description(0).c_str());
  return Catch::Session().run(argc, argv);
}
