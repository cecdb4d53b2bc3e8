// The op table's elementwise ops: arithmetic, activations, extremes, where, comparisons and the
// in-place updates (docs/ops.md's first rows).
#include <cmath>
#include <optional>

#include "core/ops/ops.h"
#include "support/op_samples.h"

namespace ember::testing {
namespace {

const double kInf = INFINITY, kNan = NAN;

// maximum and minimum at a NaN: the result is NaN on every device and in PyTorch, but PyTorch
// passes the whole gradient to both operands there and ember passes none (docs/ops.md), so the
// NaN samples are compared between ember's devices only.
const std::string kAtNan = "";

// A differentiable elementwise op (every sample differentiates every floating input).
OpInfo differentiable(std::string name, Tolerance tolerance, std::function<std::vector<Sample>()> samples,
                      std::optional<Tolerance> grad_tolerance = {}) {
  return {std::move(name), true, true, false, tolerance, std::move(samples), grad_tolerance.value_or(tolerance)};
}
// One that broadcasts: the gradient of a broadcast input is summed over the broadcast dims, a
// reduction of up to 37 terms (kLarge with [45]).
OpInfo broadcasting(std::string name, Tolerance tolerance, std::function<std::vector<Sample>()> samples) {
  return {std::move(name), true, true, false, tolerance, std::move(samples), kReduction};
}

// A unary op over unary_samples in [low, high) and one sample of the edge values given.
OpInfo unary(std::string name, Tolerance tolerance, const OpFn& apply, const std::string& torch, double low,
             double high, const std::vector<double>& edges, std::optional<Tolerance> grad_tolerance = {}) {
  return differentiable(
      std::move(name), tolerance,
      [=] { return join(unary_samples(apply, torch, low, high), {edge_sample(apply, torch, edges)}); }, grad_tolerance);
}

// tanh's and sigmoid's gradients are formed from the result, g·(1 − out²) and g·out·(1 − out):
// near |out| = 1 the subtraction cancels, so a result a few ulp off (kTranscendental) moves the
// gradient by up to ~5 ulp of 1, 3e-7, whatever its size (on the CPU, f32 against f64, 8e-8 is
// seen already): an absolute 1e-6.
constexpr Tolerance kFromResult{1e-6, 2e-6};

// A comparison: u8 masks, the same bits on every device. gt and lt also take a number.
OpInfo comparison(std::string name, const OpFn& apply, const std::string& torch, const OpFn& with_number = {},
                  const std::string& torch_with_number = {}) {
  return {std::move(name), false, true, false, kExact, [=] {
            std::vector<Sample> samples =
                join(binary_samples(apply, torch), {tie_sample(apply, torch), nan_sample(apply, torch)});
            if (with_number)
              samples.push_back(edge_sample(with_number, torch_with_number, {0.5, 1, -1, kNan}, "with 0.5"));
            return samples;
          }};
}

std::vector<Sample> where_samples() {
  const std::string torch = "torch.where(x0.bool(), x1, x2)";
  const OpFn apply = EMBER_APPLY(where(x[0], x[1], x[2]));
  const std::vector<std::size_t> values = {1, 2};  // no gradient to the condition
  return {
      {.label = "u8 [3, 4] selecting [3, 4] or [4]",
       .inputs = {mask_input({3, 4}, 31), random_input({3, 4}, 32), random_input({4}, 33)},
       .apply = apply,
       .grad_inputs = values,
       .torch = torch},
      {.label = "u8 [3, 1] selecting [1, 4] or [3, 4]",
       .inputs = {mask_input({3, 1}, 34), random_input({1, 4}, 35), random_input({3, 4}, 36)},
       .apply = apply,
       .grad_inputs = values,
       .torch = torch},
      {.label = "a floating condition compared with 0 (±0 false, NaN true)",
       .inputs = {values_input({0, -0.0, kNan, 2, -1, 0.5}, {6}), random_input({6}, 37), random_input({6}, 38)},
       .apply = apply,
       .grad_inputs = values,
       .torch = "torch.where(x0 != 0, x1, x2)"},
      {.label = "u8 [37, 45] selecting [37, 45] or [45]",
       .inputs = {mask_input(kLarge, 39), random_input(kLarge, 40), random_input({45}, 41)},
       .apply = apply,
       .grad_inputs = values,
       .torch = torch,
       .gradcheck = false},
  };
}

// In place on a copy (the sample's input stays as it was), outside autograd.
Tensor add_into_copy(const std::vector<Tensor>& x) {
  Tensor y = x[0].clone();
  return add_(y, x[1]);
}
// add_ broadcasts `other` to the input's shape, never the input.
std::vector<Sample> add_samples() {
  const std::vector<std::pair<Shape, Shape>> shapes{
      {{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 3, 4}, {3, 1}}, {kLarge, {45}}};
  std::vector<Sample> samples;
  std::uint64_t seed = 50;
  for (const auto& [a, b] : shapes) {
    samples.push_back({.label = shape_str(a) + " += " + shape_str(b),
                       .inputs = {random_input(a, seed), random_input(b, seed + 1)},
                       .apply = add_into_copy,
                       .torch = "x0.clone().add_(x1)"});
    seed += 2;
  }
  return samples;
}
Tensor scale_copy(const std::vector<Tensor>& x) {
  Tensor y = x[0].clone();
  return mul_(y, -2.5);
}

}  // namespace

std::vector<OpInfo> elementwise_ops() {
  return {
      broadcasting("add", kArithmetic,
                   [] {
                     return join(binary_samples(EMBER_APPLY(add(x[0], x[1])), "torch.add(x0, x1)"),
                                 {{.label = "[3, 4] + a number",
                                   .inputs = {random_input({3, 4}, 1)},
                                   .apply = EMBER_APPLY(add(x[0], 2.5)),
                                   .torch = "x0 + 2.5"}});
                   }),
      broadcasting("sub", kArithmetic, [] { return binary_samples(EMBER_APPLY(sub(x[0], x[1])), "x0 - x1"); }),
      broadcasting("mul", kArithmetic,
                   [] {
                     return join(binary_samples(EMBER_APPLY(mul(x[0], x[1])), "x0 * x1"),
                                 {{.label = "[3, 4] · a number",
                                   .inputs = {random_input({3, 4}, 2)},
                                   .apply = EMBER_APPLY(mul(x[0], -1.5)),
                                   .torch = "x0 * -1.5"}});
                   }),
      // Denominators kept away from 0, positive and negative.
      broadcasting("div", kArithmetic,
                   [] {
                     const OpFn apply = EMBER_APPLY(div(x[0], x[1]));
                     return join(binary_samples(apply, "x0 / x1", 0.5, 2),
                                 {{.label = "[3, 4] / negative [3, 4]",
                                   .inputs = {random_input({3, 4}, 3), random_input({3, 4}, 4, -2, -0.5)},
                                   .apply = apply,
                                   .torch = "x0 / x1"}});
                   }),
      // No torch: PyTorch spells x·s + t with two ops (add and mul are compared with it).
      differentiable("affine", kArithmetic,
                     [] {
                       return join(unary_samples(EMBER_APPLY(affine(x[0], 0.5, 3)), "", -1, 1),
                                   {{.label = "3 − x·0.5, x / 4 (the operators)",
                                     .inputs = {random_input({3, 4}, 5)},
                                     .apply = EMBER_APPLY((3.0 - x[0] * 0.5) + x[0] / 4.0),
                                     .ops_chained = 4}});
                     }),
      unary("neg", kExact, EMBER_APPLY(neg(x[0])), "torch.neg(x0)", -1, 1, {0, -0.0, kInf, -kInf}),
      // exp(−100) is a float denormal.
      unary("exp", kTranscendental, EMBER_APPLY(exp(x[0])), "torch.exp(x0)", -3, 3, {-100, -0.0, 0, 20}),
      unary("log", kTranscendental, EMBER_APPLY(log(x[0])), "torch.log(x0)", 0.5, 3, {0, 1e-3, 1, 100}),
      unary("sqrt", kTranscendental, EMBER_APPLY(sqrt(x[0])), "torch.sqrt(x0)", 0.5, 3, {0, 1e-6, 1, 4}),
      differentiable("pow", kTranscendental,
                     [] {
                       return join(
                           unary_samples(EMBER_APPLY(pow(x[0], 3.0)), "torch.pow(x0, 3.0)", -1, 1),
                           {{.label = "x², written x·x",
                             .inputs = {random_input({3, 4}, 6)},
                             .apply = EMBER_APPLY(pow(x[0], 2.0)),
                             .torch = "torch.pow(x0, 2.0)"},
                            {.label = "x^1.5 of positive x",
                             .inputs = {random_input({3, 4}, 7, 0.5, 2)},
                             .apply = EMBER_APPLY(pow(x[0], 1.5)),
                             .torch = "torch.pow(x0, 1.5)"},
                            {.label = "x^−0.5 of positive x",
                             .inputs = {random_input({7}, 8, 0.5, 2)},
                             .apply = EMBER_APPLY(pow(x[0], -0.5)),
                             .torch = "torch.pow(x0, -0.5)"},
                            edge_sample(EMBER_APPLY(pow(x[0], 2.0)), "torch.pow(x0, 2.0)", {0, -0.0, -3, 1e-20})});
                     }),
      unary("sigmoid", kTranscendental, EMBER_APPLY(sigmoid(x[0])), "torch.sigmoid(x0)", -5, 5, {-100, 0, 100},
            kFromResult),
      unary("tanh", kTranscendental, EMBER_APPLY(tanh(x[0])), "torch.tanh(x0)", -3, 3, {-20, -0.0, 0, 20}, kFromResult),
      unary("relu", kExact, EMBER_APPLY(relu(x[0])), "torch.relu(x0)", -1, 1, {-1, -0.0, 0, 1e-30, 2}),
      // x·slope rounds once.
      differentiable(
          "leaky_relu", kArithmetic,
          [] {
            return join(unary_samples(EMBER_APPLY(leaky_relu(x[0])), "F.leaky_relu(x0, 0.01)", -1, 1),
                        {{.label = "slope 0.2",
                          .inputs = {random_input({3, 4}, 9)},
                          .apply = EMBER_APPLY(leaky_relu(x[0], 0.2)),
                          .torch = "F.leaky_relu(x0, 0.2)"},
                         edge_sample(EMBER_APPLY(leaky_relu(x[0], 0.2)), "F.leaky_relu(x0, 0.2)", {-1, -0.0, 0, 3})});
          }),
      unary("erf", kTranscendental, EMBER_APPLY(erf(x[0])), "torch.erf(x0)", -3, 3, {-0.0, 0, -5, 5}),
      unary("gelu", kTranscendental, EMBER_APPLY(gelu(x[0])), "F.gelu(x0)", -4, 4, {-0.0, 0, -10, 10, -30}),
      unary("rsqrt", kTranscendental, EMBER_APPLY(rsqrt(x[0])), "torch.rsqrt(x0)", 0.5, 3, {0, 1, 4, 1e6}),
      unary("abs", kExact, EMBER_APPLY(abs(x[0])), "torch.abs(x0)", -1, 1, {-0.0, 0, -2, 3}),
      unary("softplus", kTranscendental, EMBER_APPLY(softplus(x[0])), "F.softplus(x0)", -5, 5,
            {-100, -20, -0.0, 0, 20, 20.5, 100}),
      differentiable(
          "clamp", kExact,
          [] {
            const OpFn apply = EMBER_APPLY(clamp(x[0], -0.5, 0.375));
            return join(unary_samples(apply, "torch.clamp(x0, -0.5, 0.375)", -1, 1),
                        {{.label = "no upper bound",
                          .inputs = {random_input({3, 4}, 10)},
                          .apply = EMBER_APPLY(clamp(x[0], 0.0, kInf)),
                          .torch = "torch.clamp(x0, min=0.0)"},
                         {.label = "no lower bound",
                          .inputs = {random_input({3, 4}, 11)},
                          .apply = EMBER_APPLY(clamp(x[0], -kInf, 0.25)),
                          .torch = "torch.clamp(x0, max=0.25)"},
                         edge_sample(apply, "torch.clamp(x0, -0.5, 0.375)", {-0.5, 0.375, -1, 1, 0}, "at the bounds")});
          }),
      broadcasting("maximum", kExact,
                   [] {
                     const OpFn apply = EMBER_APPLY(maximum(x[0], x[1]));
                     return join(binary_samples(apply, "torch.maximum(x0, x1)"),
                                 {tie_sample(apply, "torch.maximum(x0, x1)"), nan_sample(apply, kAtNan)});
                   }),
      broadcasting("minimum", kExact,
                   [] {
                     const OpFn apply = EMBER_APPLY(minimum(x[0], x[1]));
                     return join(binary_samples(apply, "torch.minimum(x0, x1)"),
                                 {tie_sample(apply, "torch.minimum(x0, x1)"), nan_sample(apply, kAtNan)});
                   }),
      broadcasting("where", kExact, where_samples),
      comparison("gt", EMBER_APPLY(gt(x[0], x[1])), "x0 > x1", EMBER_APPLY(gt(x[0], 0.5)), "x0 > 0.5"),
      comparison("lt", EMBER_APPLY(lt(x[0], x[1])), "x0 < x1", EMBER_APPLY(lt(x[0], 0.5)), "x0 < 0.5"),
      comparison("ge", EMBER_APPLY(ge(x[0], x[1])), "x0 >= x1"),
      comparison("le", EMBER_APPLY(le(x[0], x[1])), "x0 <= x1"),
      comparison("eq", EMBER_APPLY(eq(x[0], x[1])), "x0 == x1"),
      comparison("ne", EMBER_APPLY(ne(x[0], x[1])), "x0 != x1"),
      {"add_", false, true, false, kArithmetic, add_samples},
      {"mul_", false, true, false, kArithmetic,
       [] { return unary_samples(scale_copy, "x0.clone().mul_(-2.5)", -1, 1); }},
  };
}

}  // namespace ember::testing
