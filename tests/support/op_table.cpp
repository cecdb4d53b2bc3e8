// The op table's assembly and the one way every test runs a sample (tests/support/op_table.h).
#include "support/op_table.h"

#include <algorithm>
#include <limits>

#include "core/ops/ops.h"
#include "core/tensor/random.h"
#include "support/op_samples.h"

namespace ember::testing {

std::vector<OpInfo> op_table() {
  std::vector<OpInfo> all;
  for (auto family : {elementwise_ops, reduction_ops, network_ops, attention_ops, shape_ops}) {
    std::vector<OpInfo> ops = family();
    all.insert(all.end(), ops.begin(), ops.end());
  }
  return all;
}

std::vector<std::size_t> differentiated_inputs(const OpInfo& op, const Sample& sample) {
  if (!op.differentiable || sample.no_grad) return {};
  if (!sample.grad_inputs.empty()) return sample.grad_inputs;
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < sample.inputs.size(); ++i)
    if (sample.inputs[i].dtype() == DType::f64) all.push_back(i);
  return all;
}

Tensor input_as(const Tensor& input, DType dtype, Device device) {
  const Tensor converted = input.dtype() == DType::f64 ? input.to(dtype) : input;
  const Tensor moved = converted.to(device);
  // Always a tensor of its own, so that a test may mark it as a leaf.
  return moved.is_same(input) ? input.clone() : moved;
}

SampleRun run_sample(const OpInfo& op, const Sample& sample, DType dtype, Device device, DType upstream_through) {
  const std::vector<std::size_t> differentiated = differentiated_inputs(op, sample);
  std::vector<Tensor> leaves;
  for (std::size_t i = 0; i < sample.inputs.size(); ++i) {
    leaves.push_back(input_as(sample.inputs[i], dtype, device));
    if (std::count(differentiated.begin(), differentiated.end(), i)) leaves.back().set_requires_grad();
  }
  SampleRun run;
  const Tensor result = sample.apply(leaves);
  run.recorded = result.requires_grad();
  run.result = result.detach().cpu();
  if (!run.recorded) return run;
  // A seeded upstream gradient rather than ones: a rule that swaps or misplaces elements shows.
  // Rounded to f32 (or a 16-bit dtype), so that the runs compared differentiate with the same one.
  run.upstream = random_input(result.shape(), 99).to(upstream_through).to(DType::f64);
  result.backward(input_as(run.upstream, result.dtype(), result.device()));
  for (std::size_t i : differentiated) {
    const Tensor g = leaves[i].grad();
    run.grads.push_back(g.defined() ? g.cpu() : g);
  }
  return run;
}

Tensor random_input(const Shape& shape, std::uint64_t seed, double low, double high) {
  Generator generator(seed);
  return uniform(shape, low, high, {.dtype = DType::f64}, &generator);
}

Tensor values_input(const std::vector<double>& values, const Shape& shape) { return from_vector(values, shape); }

Sample call(std::string label, std::vector<Tensor> inputs, OpFn apply, std::string torch) {
  const bool small = inputs.at(0).numel() < kLarge[0] * kLarge[1];
  return {.label = std::move(label),
          .inputs = std::move(inputs),
          .apply = std::move(apply),
          .torch = std::move(torch),
          .gradcheck = small};
}

Sample at_kink(Sample sample) {
  sample.gradcheck = false;
  return sample;
}

std::vector<Sample> unary_samples(const OpFn& apply, const std::string& torch, double low, double high) {
  const std::vector<std::pair<std::string, Shape>> shapes{
      {"a scalar", {}}, {"[7]", {7}}, {"[3, 4]", {3, 4}}, {"[2, 3, 4]", {2, 3, 4}}, {"[0, 3] (empty)", {0, 3}}};
  std::vector<Sample> samples;
  std::uint64_t seed = 1;
  for (const auto& [label, shape] : shapes)
    samples.push_back(
        {.label = label, .inputs = {random_input(shape, seed++, low, high)}, .apply = apply, .torch = torch});
  samples.push_back({.label = "[37, 45]",
                     .inputs = {random_input(kLarge, seed, low, high)},
                     .apply = apply,
                     .torch = torch,
                     .gradcheck = false});
  return samples;
}

Sample edge_sample(const OpFn& apply, const std::string& torch, const std::vector<double>& values,
                   const std::string& label) {
  return {.label = label,
          .inputs = {values_input(values, {static_cast<std::int64_t>(values.size())})},
          .apply = apply,
          .torch = torch,
          .gradcheck = false};
}

std::vector<Sample> binary_samples(const OpFn& apply, const std::string& torch, double low, double high) {
  const std::vector<std::pair<Shape, Shape>> shapes{{{3, 4}, {3, 4}}, {{3, 4}, {4}},       {{3, 1}, {1, 4}},
                                                    {{}, {2, 3}},     {{2, 3, 4}, {3, 1}}, {kLarge, {45}}};
  std::vector<Sample> samples;
  std::uint64_t seed = 11;
  for (const auto& [a, b] : shapes) {
    Sample s{.label = shape_str(a) + " with " + shape_str(b),
             .inputs = {random_input(a, seed, -1, 1), random_input(b, seed + 1, low, high)},
             .apply = apply,
             .torch = torch,
             .gradcheck = a != kLarge};
    seed += 2;
    samples.push_back(std::move(s));
  }
  return samples;
}

Tensor mask_input(const Shape& shape, std::uint64_t seed) { return gt(random_input(shape, seed), 0.0); }

Sample tie_sample(const OpFn& apply, const std::string& torch) {
  return {.label = "ties and ±0",
          .inputs = {values_input({1, 2, -0.0, 0, 3, -1, 5}, {7}), values_input({1, 3, 0, -0.0, 3, -1, 4}, {7})},
          .apply = apply,
          .torch = torch,
          .gradcheck = false};
}

Sample nan_sample(const OpFn& apply, const std::string& torch) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {.label = "NaN",
          .inputs = {values_input({nan, 2, nan, 1}, {4}), values_input({2, nan, nan, 1}, {4})},
          .apply = apply,
          .torch = torch,
          .gradcheck = false};
}

}  // namespace ember::testing
