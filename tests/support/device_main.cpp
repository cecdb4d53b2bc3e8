// Main of the tests written once for "a device", as PyTorch's instantiate_device_type_tests writes
// a test class once and instantiates it per device type:
//   BINARY --device cpu|cuda [Catch2 arguments]
// CTest runs each such binary once per device (ember_device_test in tests/CMakeLists.txt: NAME_cpu,
// NAME_cuda). A device this machine does not have exits 77, which CTest reports as skipped
// (SKIP_RETURN_CODE): Catch2 v2 has no SKIP.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/cuda/runtime.h"
#include "support/device_under_test.h"

namespace ember::testing {
namespace {
Device chosen = Device::cpu();
}  // namespace

Device device_under_test() { return chosen; }

}  // namespace ember::testing

int main(int argc, char** argv) {
  using namespace ember;
  const std::string name = std::filesystem::path(argv[0]).filename().string();
  if (argc < 3 || std::strcmp(argv[1], "--device") != 0) {
    std::fprintf(stderr, "usage: %s --device cpu|cuda [Catch2 arguments]\n", name.c_str());
    return 2;
  }
  testing::chosen = Device::parse(argv[2]);
  if (testing::chosen.is_cuda() && !cuda::is_available()) {
    std::printf("%s on %s: skipped: no usable CUDA device (%s)\n", name.c_str(), argv[2],
                cuda::unavailable_reason().c_str());
    return 77;
  }
  std::printf("%s on %s\n", name.c_str(), testing::chosen.str().c_str());
  // Catch2 sees the program name and the arguments after the device.
  std::vector<char*> rest{argv[0]};
  for (int i = 3; i < argc; ++i) rest.push_back(argv[i]);
  return Catch::Session().run(static_cast<int>(rest.size()), rest.data());
}
