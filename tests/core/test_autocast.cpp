// Autocast (core/ops/autocast.h) on the device under test (autocast_cpu, autocast_cuda): every op
// of the op table follows its policy on this device, an MLP under autocast computes what explicit
// casts compute, bit for bit, and the scope's state and cast cache end with it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <set>

#include "core/ops/autocast.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "support/device_under_test.h"
#include "support/helpers.h"
#include "support/op_table.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

namespace {

// The dtype of an op's floating result under autocast to `lowered`, given its dtype without.
DType expected_result(CastPolicy policy, DType plain, DType lowered) {
  switch (policy) {
    case CastPolicy::lower_precision:
      return lowered;
    case CastPolicy::fp32:
      return DType::f32;
    case CastPolicy::none:
    case CastPolicy::promote:
      return plain;  // the samples' floating inputs share one dtype
  }
  return plain;
}

Tensor param(const Shape& shape, std::uint64_t seed, Device device) {
  return random_input(shape, seed, -0.5, 0.5).to(DType::f32).to(device).set_requires_grad();
}

}  // namespace

TEST_CASE("autocast: every op of the table follows its policy on the device under test") {
  const Device device = device_under_test();
  std::set<std::string> names;
  for (const OpInfo& op : op_table()) {
    names.insert(op.name);
    const std::optional<OpKey> key = op_key(op.name);
    INFO(op.name);
    REQUIRE(key.has_value());  // every op of the table is on the op list, so it has a policy
    if (!(device.is_cpu() || op.cuda)) continue;
    const CastPolicy policy = autocast_policy(*key, device);
    const std::vector<Sample> samples = op.samples();
    const Sample& s = samples.front();
    for (const DType lowered : {DType::bf16, DType::f16}) {
      for (const DType in : {DType::f32, lowered}) {
        INFO(op.name << ": " << s.label << ", inputs " << in << ", autocast to " << lowered << ", policy "
                     << cast_policy_name(policy));
        std::vector<Tensor> inputs;
        for (const Tensor& t : s.inputs) inputs.push_back(input_as(t, in, device));
        Tensor plain, cast;
        plain = s.apply(inputs);
        {
          const auto scope = autocast(device, lowered);
          cast = s.apply(inputs);
        }
        if (!is_floating(plain.dtype())) {
          CHECK(cast.dtype() == plain.dtype());  // indices, masks, counts
          continue;
        }
        const bool floating_inputs =
            std::any_of(s.inputs.begin(), s.inputs.end(), [](const Tensor& t) { return t.dtype() == DType::f64; });
        CHECK(cast.dtype() == (floating_inputs ? expected_result(policy, plain.dtype(), lowered) : plain.dtype()));
      }
    }
  }
  // And every op of the list is an op of the table (no misspelt spelling, no op left untested).
  for (const OpEntry& entry : kOps) {
    INFO(entry.spelling);
    CHECK(names.count(std::string(entry.spelling)) == 1);
  }
  CHECK(names.size() == kOpCount);
}

TEST_CASE("autocast: an MLP computes what explicit casts compute, with f32 gradients for f32 parameters") {
  const Device device = device_under_test();
  const Tensor x = random_input({16, 12}, 1).to(DType::f32).to(device);
  const Tensor y = from_vector<std::int64_t>({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0}, {16}).to(device);
  for (const DType lowered : {DType::bf16, DType::f16}) {
    INFO("autocast to " << lowered);
    const Tensor w1 = param({20, 12}, 2, device), b1 = param({20}, 3, device);
    const Tensor w2 = param({5, 20}, 4, device), b2 = param({5}, 5, device);
    Tensor hidden, logits, loss;
    {
      const auto scope = autocast(device, lowered);
      hidden = relu(linear(x, w1, b1));
      logits = linear(hidden, w2, b2);
      loss = cross_entropy(logits, y);
    }
    CHECK((hidden.dtype() == lowered && logits.dtype() == lowered && loss.dtype() == DType::f32));
    loss.backward();
    // The same by hand, without autocast.
    const Tensor w1c = w1.detach().set_requires_grad(), b1c = b1.detach().set_requires_grad();
    const Tensor w2c = w2.detach().set_requires_grad(), b2c = b2.detach().set_requires_grad();
    const auto low = [&](const Tensor& t) { return t.to(lowered); };
    const Tensor h = relu(linear(low(x), low(w1c), low(b1c)));
    const Tensor by_hand = cross_entropy(linear(h, low(w2c), low(b2c)).to(DType::f32), y);
    by_hand.backward();
    CHECK(loss.item<float>() == by_hand.item<float>());
    for (const auto& [auto_param, hand_param] : {std::pair{w1, w1c}, {b1, b1c}, {w2, w2c}, {b2, b2c}}) {
      REQUIRE(auto_param.grad().defined());
      CHECK(auto_param.grad().dtype() == DType::f32);
      CHECK(auto_param.grad().to_vector<float>() == hand_param.grad().to_vector<float>());
    }
  }
}

TEST_CASE("autocast: cross_entropy with label smoothing computes in f32, as PyTorch's one op") {
  const Device device = device_under_test();
  const Tensor y = from_vector<std::int64_t>({0, 3, 2, 1, 4, 0}, {6}).to(device);
  for (const DType lowered : {DType::bf16, DType::f16}) {
    INFO("autocast to " << lowered);
    const Tensor logits = random_input({6, 5}, 7).to(lowered).to(device);
    Tensor loss;
    {
      const auto scope = autocast(device, lowered);
      loss = cross_entropy(logits, y, 0.1);
    }
    CHECK(loss.dtype() == DType::f32);
    CHECK(loss.item<float>() == cross_entropy(logits.to(DType::f32), y, 0.1).item<float>());
  }
}

TEST_CASE("autocast: scopes nest and restore, the backward pass runs without autocast, casts end with the scope") {
  const Device device = device_under_test();
  const Device other = device.is_cuda() ? Device::cpu() : Device::cuda();
  CHECK_FALSE(autocast_enabled(device));
  {
    const auto outer = autocast(device, DType::bf16);
    CHECK((autocast_enabled(device) && autocast_dtype(device) == DType::bf16));
    CHECK_FALSE(autocast_enabled(other));  // one device type at a time, as in PyTorch
    {
      const auto inner = autocast(device, DType::f16, false);
      CHECK_FALSE(autocast_enabled(device));
    }
    CHECK((autocast_enabled(device) && autocast_dtype(device) == DType::bf16));
  }
  CHECK_FALSE(autocast_enabled(device));
  CHECK(autocast_dtype(Device::cpu()) == DType::bf16);  // PyTorch's defaults
  CHECK(autocast_dtype(Device::cuda()) == DType::f16);
  CHECK_THAT(message_of<ValueError>([&] { const auto s = autocast(device, DType::f32); }), Contains("bf16 or f16"));

  // A weight changed between two scopes is cast afresh in the second (the cache ends with the first).
  Tensor w = param({3, 4}, 7, device);
  const Tensor x = random_input({2, 4}, 8).to(DType::f32).to(device);
  Tensor first, second;
  {
    const auto scope = autocast(device, DType::bf16);
    first = linear(x, w);  // w's bf16 cast is cached for this scope
  }
  {
    NoGradGuard no_grad;
    mul_(w, 2.0);
  }
  {
    const auto scope = autocast(device, DType::bf16);
    second = linear(x, w);
    // A leaf parameter used twice in one scope: the same cast, and both uses' gradients.
    const Tensor twice = add(linear(x, w), linear(x, w));
    CHECK(twice.to_vector<float>() == add(second, second).to_vector<float>());
    sum(twice).backward();  // inside the scope: runs without autocast, gradients in f32
  }
  CHECK(second.to_vector<float>() == linear(x.to(DType::bf16), w.detach().to(DType::bf16)).to_vector<float>());
  CHECK(second.to_vector<float>() != first.to_vector<float>());
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::f32);
}
