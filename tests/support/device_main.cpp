// Main of the tests written once for "a device", as PyTorch's instantiate_device_type_tests writes
// a test class once and instantiates it per device type:
//   test_op_devices --device cpu|cuda [Catch2 arguments]   the tests, on that device
//   test_op_devices --op-names                             the op table, one op a line
// CTest runs the tests once per device (ops_cpu, ops_cuda). A device this machine does not have
// exits 77, which CTest reports as skipped (SKIP_RETURN_CODE): Catch2 v2 has no SKIP.
// --op-names prints each op's name and what the tests do with it (scripts/check_op_docs.py reads
// it): `name gradcheck=0|1 cuda=0|1 torch=0|1`.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

#include "core/cuda/runtime.h"
#include "support/device_under_test.h"
#include "support/op_table.h"

namespace ember::testing {
namespace {
Device chosen = Device::cpu();

int print_op_names() {
  for (const OpInfo& op : op_table()) {
    bool gradcheck = false, torch = false;
    for (const Sample& s : op.samples()) {
      gradcheck |= s.gradcheck && !differentiated_inputs(op, s).empty();
      torch |= !s.torch.empty();
    }
    std::printf("%s gradcheck=%d cuda=%d torch=%d\n", op.name.c_str(), gradcheck, op.cuda, torch);
  }
  return 0;
}
}  // namespace

Device device_under_test() { return chosen; }

}  // namespace ember::testing

int main(int argc, char** argv) {
  using namespace ember;
  if (argc >= 2 && std::strcmp(argv[1], "--op-names") == 0) return testing::print_op_names();
  if (argc < 3 || std::strcmp(argv[1], "--device") != 0) {
    std::fprintf(stderr, "usage: %s --device cpu|cuda [Catch2 arguments] | --op-names\n", argv[0]);
    return 2;
  }
  testing::chosen = Device::parse(argv[2]);
  if (testing::chosen.is_cuda() && !cuda::is_available()) {
    std::printf("ops on %s: skipped: no usable CUDA device (%s)\n", argv[2], cuda::unavailable_reason().c_str());
    return 77;
  }
  std::printf("ops on %s\n", testing::chosen.str().c_str());
  // Catch2 sees the program name and the arguments after the device.
  std::vector<char*> rest{argv[0]};
  for (int i = 3; i < argc; ++i) rest.push_back(argv[i]);
  return Catch::Session().run(static_cast<int>(rest.size()), rest.data());
}
