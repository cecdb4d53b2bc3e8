// Tensors on the device under test (tensor_cpu, tensor_cuda): every dtype's round trip to the
// device and back, and every cast between two dtypes there against the CPU's, bit for bit — the
// half types' rounding (Note [half conversions]) included, on values chosen to hit its cases.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/ops/ops.h"
#include "support/device_under_test.h"
#include "support/helpers.h"

using namespace ember;
using ember::testing::device_under_test;

namespace {

// f64 values that exercise every conversion: ties and near-ties of the 16-bit formats, their
// subnormals and overflow thresholds, integers and their limits, NaN, ±∞, ±0, and random values.
std::vector<double> awkward_values() {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v{0.0,     -0.0,    1.0,          -1.5,          2.5,     255.5, 256.0, -129.0, 65504.0,
                        65519.0, 65520.0, 65536.0,      3.4e38,        -3.4e38, 1e-5,  6e-8,  2.9e-8, -3e-8,
                        1e-40,   -1e-45,  2147483520.0, -2147483648.0, 1e10,    -1e19, inf,   -inf,   std::nan("")};
  // Ties of bfloat16 (1 + 2^-8·k + 2^-9) and of float16 (1 + 2^-11), and a hair off them.
  for (int k = 0; k < 4; ++k) {
    for (double tie : {1.0 + std::ldexp(2 * k + 1, -9), 1.0 + std::ldexp(2 * k + 1, -11)}) {
      v.push_back(tie);
      v.push_back(std::nextafter(static_cast<float>(tie), 2.0f));
      v.push_back(-std::nextafter(static_cast<float>(tie), 0.0f));
    }
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> exponent(-30, 40);
  for (int i = 0; i < 997; ++i) v.push_back(std::exp2(exponent(rng)) * (i % 2 ? -1 : 1) * (1 + (rng() % 1000) / 1e3));
  return v;
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const Tensor host = t.cpu();
  std::vector<std::uint8_t> out(host.nbytes());
  if (!out.empty()) std::memcpy(out.data(), host.raw_bytes(), out.size());
  return out;
}

const std::vector<DType> kAll{DType::f32, DType::f64, DType::i32, DType::i64, DType::u8, DType::bf16, DType::f16};

}  // namespace

TEST_CASE("every dtype travels to the device and back unchanged") {
  const std::vector<double> values = awkward_values();
  const Tensor source = from_vector<double>(values, {static_cast<std::int64_t>(values.size())});
  for (DType d : kAll) {
    INFO(d);
    const Tensor here = source.to(d);
    const Tensor there = here.to(device_under_test());
    CHECK((there.dtype() == d && there.device() == device_under_test()));
    CHECK(bytes_of(there) == bytes_of(here));
  }
}

TEST_CASE("every cast between two dtypes gives the CPU's bits on the device") {
  const std::vector<double> values = awkward_values();
  const Tensor source = from_vector<double>(values, {static_cast<std::int64_t>(values.size())});
  for (DType from : kAll) {
    const Tensor input = source.to(from);
    const Tensor on_device = input.to(device_under_test());
    for (DType to : kAll) {
      INFO(from << " to " << to);
      const Tensor expected = input.to(to);
      const Tensor got = on_device.to(to);
      CHECK(got.dtype() == to);
      CHECK(bytes_of(got) == bytes_of(expected));
    }
  }
  // Nothing to convert: an empty tensor of each pair.
  const Tensor empty_on_device = from_vector<float>({}, {0}).to(device_under_test());
  for (DType to : kAll) CHECK(empty_on_device.to(to).numel() == 0);
}
