// Every op of the op table (tests/support/op_table.h) on the device under test, written once for
// "a device" and run once per device (CTest ops_cpu and ops_cuda; tests/support/device_main.cpp):
//   - on the CPU, each op's f32 result and gradients against its f64 ones on the same (f32-exact)
//     values, or against the sample's reference where its inputs are not floating;
//   - on CUDA, each op's result and gradients against the CPU's, both f32 — every op with a CUDA
//     path, every sample.
// Either way within the op's tolerance (the same bits where it is kExact, the sign of zero
// included), autograd recording exactly where the table says, and the inputs left unchanged.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "base/config.h"
#include "core/cuda/runtime.h"
#include "support/device_under_test.h"
#include "support/helpers.h"
#include "support/op_table.h"

using namespace ember;
using namespace ember::testing;

namespace {

// The sample with its floating inputs rounded to f32 or a 16-bit dtype (kept in f64): a run in a
// wider dtype then sees the values the narrower run sees, and only the op's own rounding differs.
Sample rounded_to(const Sample& s, DType dtype) {
  Sample r = s;
  for (Tensor& t : r.inputs)
    if (t.dtype() == DType::f64) t = t.to(dtype).to(DType::f64);
  return r;
}

// What the device under test is compared with: on CUDA the CPU in f32; on the CPU the f64 run (or
// the sample's reference, for the result, where there is one).
SampleRun expected_run(const OpInfo& op, const Sample& s, Device device) {
  if (device.is_cuda()) return run_sample(op, s, DType::f32, Device::cpu());
  const Sample r = rounded_to(s, DType::f32);
  SampleRun run = run_sample(op, r, DType::f64, Device::cpu());
  if (s.reference) run.result = s.reference(r.inputs);
  return run;
}

bool same_bits(double a, double b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

// Within the tolerance element by element; with kExact, bit for bit (−0 is not 0) as a double.
void require_close(const Tensor& actual, const Tensor& expected, const Tolerance& tolerance) {
  REQUIRE(actual.defined());
  REQUIRE(expected.defined());
  REQUIRE(shape_str(actual.shape()) == shape_str(expected.shape()));
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  INFO("tolerance: atol " << tolerance.atol << ", rtol " << tolerance.rtol);
  EMBER_REQUIRE_CLOSE(a, e, tolerance.atol, tolerance.rtol);
  if (tolerance.atol != 0 || tolerance.rtol != 0) return;
  std::size_t i = 0;
  while (i < a.size() && same_bits(a[i], e[i])) ++i;
  INFO("element " << i << " differs in its bits (the sign of a zero?)");
  REQUIRE(i == a.size());
}

// Runs a sample on the device, checking that the op left its inputs as they were.
SampleRun run_checked(const OpInfo& op, const Sample& s, Device device) {
  std::vector<std::vector<double>> before;
  for (const Tensor& t : s.inputs) before.push_back(t.to_vector<double>());
  SampleRun run = run_sample(op, s, DType::f32, device);
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    const std::vector<double> after = s.inputs[i].to_vector<double>();
    INFO("input " << i << " was changed by the op");
    REQUIRE(std::equal(after.begin(), after.end(), before[i].begin(), same_bits));
  }
  return run;
}

bool applies_here(const OpInfo& op, Device device) { return device.is_cpu() || op.cuda; }

// Whether this build can run the op's CUDA path (the convolutions need cuDNN).
bool buildable(const OpInfo& op, Device device) { return !(device.is_cuda() && op.needs_cudnn && !EMBER_WITH_CUDNN); }

// cuDNN may pick non-deterministic algorithms unless asked not to (docs/architecture.md); this
// asks, and restores the setting however the test ends.
struct DeterministicScope {
  bool was = cuda::deterministic();
  DeterministicScope() { cuda::set_deterministic(true); }
  ~DeterministicScope() { cuda::set_deterministic(was); }
};

}  // namespace

TEST_CASE("the op table: unique names and labels, samples for every op, a gradcheck for every rule") {
  std::set<std::string> names;
  for (const OpInfo& op : op_table()) {
    INFO(op.name);
    CHECK(names.insert(op.name).second);
    const std::vector<Sample> samples = op.samples();
    REQUIRE(!samples.empty());
    std::set<std::string> labels;
    bool gradchecked = false;
    for (const Sample& s : samples) {
      INFO(s.label);
      CHECK(labels.insert(s.label).second);
      CHECK(static_cast<bool>(s.apply));
      for (std::size_t i : differentiated_inputs(op, s)) CHECK(i < s.inputs.size());
      gradchecked |= s.gradcheck && !differentiated_inputs(op, s).empty();
    }
    CHECK(gradchecked == op.differentiable);
  }
}

TEST_CASE("every op on the device under test: results and gradients as the reference's") {
  const Device device = device_under_test();
  for (const OpInfo& op : op_table()) {
    if (!applies_here(op, device)) continue;
    for (const Sample& s : op.samples()) {
      SECTION(op.name + ": " + s.label) {
        if (!buildable(op, device)) EMBER_SKIP_CASE(op.name + " on CUDA needs cuDNN, which this build has not");
        INFO("on " << device.str());
        const SampleRun actual = run_checked(op, s, device);
        const SampleRun expected = expected_run(op, s, device);
        const std::vector<std::size_t> differentiated = differentiated_inputs(op, s);
        // Recorded exactly where the table says the op is differentiated.
        REQUIRE(actual.recorded == !differentiated.empty());
        if (device.is_cuda()) CHECK(actual.result.dtype() == expected.result.dtype());
        {
          INFO("result");
          require_close(actual.result, expected.result, op.tolerance);
        }
        REQUIRE(actual.grads.size() == expected.grads.size());
        for (std::size_t i = 0; i < actual.grads.size(); ++i) {
          INFO("gradient of input " << differentiated[i]);
          require_close(actual.grads[i], expected.grads[i], op.grad_tolerance);
        }
      }
    }
  }
}

// A floating result of the f32 run rounded once to the 16-bit run's dtype (others as they are).
Tensor rounded_like(const Tensor& expected, const Tensor& actual) {
  return expected.dtype() == DType::f32 && is_half(actual.dtype()) ? expected.to(actual.dtype()) : expected;
}

TEST_CASE("every op in bf16 and f16 on the device under test: the f32 op's results, rounded once") {
  const Device device = device_under_test();
  const DeterministicScope deterministic;
  for (const DType half : {DType::bf16, DType::f16}) {
    for (const OpInfo& op : op_table()) {
      if (!applies_here(op, device) || !buildable(op, device)) continue;
      for (const Sample& s : op.samples()) {
        SECTION(std::string(dtype_name(half)) + " " + op.name + ": " + s.label) {
          const Sample r = rounded_to(s, half);
          Tolerance tolerance = op.half_tolerance;
          tolerance.rtol += kHalfChain.rtol * (s.ops_chained - 1);
          const SampleRun actual = run_sample(op, r, half, device, half);
          const SampleRun expected = run_sample(op, r, DType::f32, device, half);
          REQUIRE(actual.recorded == expected.recorded);
          // A floating result comes in the inputs' dtype, as in PyTorch.
          CHECK((actual.result.dtype() == expected.result.dtype() ||
                 (actual.result.dtype() == half && expected.result.dtype() == DType::f32)));
          {
            INFO("result");
            require_close(actual.result, rounded_like(expected.result, actual.result), tolerance);
          }
          REQUIRE(actual.grads.size() == expected.grads.size());
          for (std::size_t i = 0; i < actual.grads.size(); ++i) {
            INFO("gradient " << i);
            REQUIRE(actual.grads[i].defined() == expected.grads[i].defined());
            if (actual.grads[i].defined())
              require_close(actual.grads[i], rounded_like(expected.grads[i], actual.grads[i]), tolerance);
          }
        }
      }
    }
  }
}

TEST_CASE("every op on the device under test gives the same bits run after run") {
  const Device device = device_under_test();
  const DeterministicScope deterministic;
  for (const OpInfo& op : op_table()) {
    if (!applies_here(op, device)) continue;
    if (!buildable(op, device)) continue;
    for (const Sample& s : op.samples()) {
      INFO(op.name << ": " << s.label);
      const SampleRun first = run_sample(op, s, DType::f32, device), second = run_sample(op, s, DType::f32, device);
      require_close(second.result, first.result, kExact);
      for (std::size_t i = 0; i < first.grads.size(); ++i) require_close(second.grads[i], first.grads[i], kExact);
    }
  }
}
