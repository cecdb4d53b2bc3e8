// The op table's reductions: sums and moments, the softmax family and cross-entropy, and the
// non-differentiable row maxima and counts.
#include <cmath>

#include "core/ops/ops.h"
#include "core/tensor/random.h"
#include "support/op_samples.h"

namespace ember::testing {
namespace {

const double kNan = NAN;

// Samples of one op over the inputs each names: {label, input, apply, torch}.
struct Call {
  std::string label;
  Tensor input;
  OpFn apply;
  std::string torch;
};
std::vector<Sample> samples_of(std::vector<Call> calls) {
  std::vector<Sample> samples;
  for (Call& c : calls)
    samples.push_back(call(std::move(c.label), {std::move(c.input)}, std::move(c.apply), std::move(c.torch)));
  return samples;
}

Tensor labels(std::int64_t classes, std::int64_t rows, std::uint64_t seed, DType dtype = DType::i64) {
  Generator generator(seed);
  return randint(0, classes, {rows}, {.dtype = dtype}, &generator);
}

// Logits around 1e4, where a rounded log-sum-exp would lose float's precision
// (Note [softmax from max and sum]); every value is exact in float.
Tensor large_logits() { return values_input({1e4, 1e4 + 1, 1e4 - 2, -1e4, 0, 1e4 + 3, 5e3, 1e4 + 0.5}, {2, 4}); }

// Row maxima with ties (the first index wins) and NaN (largest), and plain random rows.
std::vector<Sample> row_max_samples(const OpFn& apply, const std::string& torch) {
  return samples_of(
      {{"[3, 4]", random_input({3, 4}, 1), apply, torch},
       {"[2, 3, 4] (over the last dim)", random_input({2, 3, 4}, 2), apply, torch},
       {"[0, 4] (no rows)", random_input({0, 4}, 3), apply, torch},
       {"ties and NaN", values_input({1, 3, 3, 0, kNan, 1, 2, kNan, -1, -1, -1, -1}, {3, 4}), apply, torch},
       {"[37, 45]", random_input(kLarge, 4), apply, torch}});
}

std::vector<Sample> softmax_samples(const OpFn& last, const OpFn& dim0, const OpFn& dim1, const std::string& torch) {
  return samples_of({{"[3, 4], last dim", random_input({3, 4}, 5, -3, 3), last, torch + "(x0, -1)"},
                     {"[5, 4], dim 0", random_input({5, 4}, 6, -3, 3), dim0, torch + "(x0, 0)"},
                     {"[2, 3, 4], a middle dim", random_input({2, 3, 4}, 7, -3, 3), dim1, torch + "(x0, 1)"},
                     {"logits around 1e4", large_logits(), last, torch + "(x0, -1)"},
                     {"[37, 45], last dim", random_input(kLarge, 8, -3, 3), last, torch + "(x0, -1)"}});
}

std::vector<Sample> cross_entropy_samples() {
  const OpFn apply = EMBER_APPLY(cross_entropy(x[0], x[1]));
  const std::string torch = "F.cross_entropy(x0, x1.long())";
  const std::vector<std::size_t> logits = {0};
  return {{.label = "[5, 4], i64 targets",
           .inputs = {random_input({5, 4}, 9, -3, 3), labels(4, 5, 10)},
           .apply = apply,
           .grad_inputs = logits,
           .torch = torch},
          {.label = "[5, 4], i32 targets",
           .inputs = {random_input({5, 4}, 11, -3, 3), labels(4, 5, 12, DType::i32)},
           .apply = apply,
           .grad_inputs = logits,
           .torch = torch},
          {.label = "logits around 1e4",
           .inputs = {large_logits(), values_input({1, 3}, {2}).to(DType::i64)},
           .apply = apply,
           .grad_inputs = logits,
           .torch = torch},
          {.label = "[37, 45]",
           .inputs = {random_input(kLarge, 13, -3, 3), labels(45, 37, 14)},
           .apply = apply,
           .grad_inputs = logits,
           .torch = torch,
           .gradcheck = false}};
}

// Targets with each class and the ignored one (1) more than once, and positive class weights.
Tensor mixed_targets(DType dtype = DType::i64) { return values_input({0, 1, 3, 1, 2, 0, 1, 3}, {8}).to(dtype); }
Tensor class_weights() { return random_input({4}, 50, 0.25, 2.0); }

// F.cross_entropy's weight, ignore_index and label_smoothing (composed: core/ops/criteria.cpp).
std::vector<Sample> cross_entropy_option_samples() {
  const std::vector<std::size_t> logits = {0};
  const auto sample = [&](std::string label, std::vector<Tensor> inputs, OpFn apply, std::string torch) {
    return Sample{.label = std::move(label),
                  .inputs = std::move(inputs),
                  .apply = std::move(apply),
                  .grad_inputs = logits,
                  .torch = std::move(torch)};
  };
  return {sample("class weights", {random_input({8, 4}, 51, -3, 3), mixed_targets(), class_weights()},
                 EMBER_APPLY(cross_entropy(x[0], x[1], CrossEntropyOptions{.weight = x[2]})),
                 "F.cross_entropy(x0, x1.long(), weight=x2)"),
          sample("ignore_index 1, label smoothing 0.1, i32 targets",
                 {random_input({8, 4}, 52, -3, 3), mixed_targets(DType::i32)},
                 EMBER_APPLY(cross_entropy(x[0], x[1], CrossEntropyOptions{.ignore_index = 1, .label_smoothing = 0.1})),
                 "F.cross_entropy(x0, x1.long(), ignore_index=1, label_smoothing=0.1)"),
          sample("weights, ignore_index 1 and label smoothing 0.2",
                 {random_input({8, 4}, 53, -3, 3), mixed_targets(), class_weights()},
                 EMBER_APPLY(cross_entropy(x[0], x[1], {.weight = x[2], .ignore_index = 1, .label_smoothing = 0.2})),
                 "F.cross_entropy(x0, x1.long(), weight=x2, ignore_index=1, label_smoothing=0.2)")};
}

std::vector<Sample> nll_samples() {
  const std::vector<std::size_t> input = {0};
  return {{.label = "[8, 4]",
           .inputs = {random_input({8, 4}, 54, -3, 0), mixed_targets()},
           .apply = EMBER_APPLY(nll_loss(x[0], x[1])),
           .grad_inputs = input,
           .torch = "F.nll_loss(x0, x1.long())"},
          {.label = "class weights, ignore_index 1",
           .inputs = {random_input({8, 4}, 55, -3, 0), mixed_targets(DType::i32), class_weights()},
           .apply = EMBER_APPLY(nll_loss(x[0], x[1], x[2], 1)),
           .grad_inputs = input,
           .torch = "F.nll_loss(x0, x1.long(), weight=x2, ignore_index=1)"},
          {.label = "[37, 45]",
           .inputs = {random_input(kLarge, 56, -3, 0), labels(45, 37, 57)},
           .apply = EMBER_APPLY(nll_loss(x[0], x[1])),
           .grad_inputs = input,
           .torch = "F.nll_loss(x0, x1.long())",
           .gradcheck = false}};
}

std::vector<Sample> mse_samples() {
  const OpFn apply = EMBER_APPLY(mse_loss(x[0], x[1]));
  const std::string torch = "F.mse_loss(x0, x1)";
  return {call("[3, 4]", {random_input({3, 4}, 58), random_input({3, 4}, 59)}, apply, torch),
          call("[2, 3, 4]", {random_input({2, 3, 4}, 60), random_input({2, 3, 4}, 61)}, apply, torch),
          call("[37, 45]", {random_input(kLarge, 62), random_input(kLarge, 63)}, apply, torch)};
}

std::vector<Sample> count_samples() {
  const OpFn apply = EMBER_APPLY(count_equal(x[0], x[1]));
  const OpFn reference = EMBER_APPLY(sum(eq(x[0].to(DType::f64), x[1].to(DType::f64)).to(DType::f64)));
  std::vector<Sample> samples;
  std::uint64_t seed = 20;
  for (auto [a, b] : {std::pair{DType::i64, DType::i64}, {DType::i64, DType::i32}, {DType::i32, DType::i32}}) {
    samples.push_back({.label = std::string(dtype_name(a)) + " with " + std::string(dtype_name(b)),
                       .inputs = {labels(3, 40, seed, a), labels(3, 40, seed + 1, b)},
                       .apply = apply,
                       .reference = reference});
    seed += 2;
  }
  samples.push_back({.label = "[1665], i64 with i32",
                     .inputs = {labels(3, 1665, 30), labels(3, 1665, 31, DType::i32)},
                     .apply = apply,
                     .reference = reference});
  return samples;
}

std::vector<Sample> accuracy_samples() {
  const OpFn apply = EMBER_APPLY(accuracy(x[0], x[1]));
  const OpFn reference = EMBER_APPLY(mean(eq(argmax(x[0]).to(DType::f64), x[1].to(DType::f64)).to(DType::f64)));
  return {{.label = "[8, 4], i64 targets",
           .inputs = {random_input({8, 4}, 40), labels(4, 8, 41)},
           .apply = apply,
           .reference = reference},
          {.label = "[8, 4], i32 targets",
           .inputs = {random_input({8, 4}, 42), labels(4, 8, 43, DType::i32)},
           .apply = apply,
           .reference = reference},
          {.label = "ties (the first index counts)",
           .inputs = {values_input({1, 1, 0, 2, 2, 0}, {2, 3}), values_input({0, 1}, {2}).to(DType::i64)},
           .apply = apply,
           .reference = reference},
          {.label = "[37, 45]",
           .inputs = {random_input(kLarge, 44), labels(45, 37, 45)},
           .apply = apply,
           .reference = reference}};
}

}  // namespace

std::vector<OpInfo> reduction_ops() {
  return {
      {"sum", true, true, false, kReduction,
       [] {
         return samples_of(
             {{"everything of [3, 4]", random_input({3, 4}, 50), EMBER_APPLY(sum(x[0])), "torch.sum(x0)"},
              {"dims {0, 2} of [2, 3, 4], keepdim", random_input({2, 3, 4}, 51), EMBER_APPLY(sum(x[0], {0, 2}, true)),
               "x0.sum(dim=(0, 2), keepdim=True)"},
              {"dim −1, keepdim", random_input({3, 4}, 52), EMBER_APPLY(sum(x[0], -1, true)),
               "x0.sum(-1, keepdim=True)"},
              {"a middle dim of [4, 5, 6]", random_input({4, 5, 6}, 53), EMBER_APPLY(sum(x[0], 1)), "x0.sum(1)"},
              {"an empty [0, 4] (0)", random_input({0, 4}, 54), EMBER_APPLY(sum(x[0])), "torch.sum(x0)"},
              {"dim 0 of [37, 45]", random_input(kLarge, 55), EMBER_APPLY(sum(x[0], 0)), "x0.sum(0)"},
              {"everything of [37, 45]", random_input(kLarge, 56), EMBER_APPLY(sum(x[0])), "torch.sum(x0)"}});
       }},
      {"mean", true, true, false, kReduction,
       [] {
         return samples_of(
             {{"everything of [3, 4]", random_input({3, 4}, 60), EMBER_APPLY(mean(x[0])), "torch.mean(x0)"},
              {"dim 1", random_input({3, 4}, 61), EMBER_APPLY(mean(x[0], 1)), "x0.mean(1)"},
              {"dims {0, 2} of [2, 3, 4], keepdim", random_input({2, 3, 4}, 62), EMBER_APPLY(mean(x[0], {0, 2}, true)),
               "x0.mean(dim=(0, 2), keepdim=True)"},
              {"an empty [0, 4] (NaN)", random_input({0, 4}, 63), EMBER_APPLY(mean(x[0])), "torch.mean(x0)"},
              {"dim 1 of [37, 45]", random_input(kLarge, 64), EMBER_APPLY(mean(x[0], 1)), "x0.mean(1)"}});
       }},
      // A composite of mean, sub, mul and sum: the reductions' bound.
      {"var", true, true, false, kReduction,
       [] {
         return samples_of(
             {{"everything of [3, 4, 5]", random_input({3, 4, 5}, 70), EMBER_APPLY(var(x[0])), "torch.var(x0)"},
              {"dim 1", random_input({3, 4}, 71), EMBER_APPLY(var(x[0], 1)), "x0.var(1)"},
              {"dims {0, 1}, biased", random_input({3, 4}, 72), EMBER_APPLY(var(x[0], {0, 1}, 0)),
               "x0.var(dim=(0, 1), correction=0)"},
              {"dims {0, 2} of [3, 4, 5], keepdim", random_input({3, 4, 5}, 73),
               EMBER_APPLY(var(x[0], {0, 2}, 1, true)), "x0.var(dim=(0, 2), correction=1, keepdim=True)"},
              {"dim 0 of [37, 45]", random_input(kLarge, 74), EMBER_APPLY(var(x[0], 0)), "x0.var(0)"}});
       }},
      {"std", true, true, false, kReduction,
       [] {
         return samples_of(
             {{"everything of [3, 4, 5]", random_input({3, 4, 5}, 80), EMBER_APPLY(ember::std(x[0])), "torch.std(x0)"},
              {"dim 1", random_input({3, 4, 5}, 81), EMBER_APPLY(ember::std(x[0], 1)), "x0.std(1)"},
              {"dims {1, 2}, biased, keepdim", random_input({3, 4, 5}, 82),
               EMBER_APPLY(ember::std(x[0], {1, 2}, 0, true)), "x0.std(dim=(1, 2), correction=0, keepdim=True)"},
              {"dim 1 of [37, 45]", random_input(kLarge, 83), EMBER_APPLY(ember::std(x[0], 1)), "x0.std(1)"}});
       }},
      {"sum_to", true, true, false, kReduction,
       [] {
         return samples_of(
             {{"[2, 3, 4] to [3, 1]", random_input({2, 3, 4}, 90), EMBER_APPLY(sum_to(x[0], {3, 1})),
               "x0.sum_to_size(3, 1)"},
              {"[2, 3, 4] to [4]", random_input({2, 3, 4}, 91), EMBER_APPLY(sum_to(x[0], {4})), "x0.sum_to_size(4)"},
              {"[3, 4] to itself", random_input({3, 4}, 92), EMBER_APPLY(sum_to(x[0], {3, 4})), "x0.sum_to_size(3, 4)"},
              {"[37, 45] to [1, 45]", random_input(kLarge, 93), EMBER_APPLY(sum_to(x[0], {1, 45})),
               "x0.sum_to_size(1, 45)"}});
       }},
      // exp and a row sum of up to 45 terms in (0, 1].
      {"softmax", true, true, false, kReduction,
       [] {
         return softmax_samples(EMBER_APPLY(softmax(x[0])), EMBER_APPLY(softmax(x[0], 0)),
                                EMBER_APPLY(softmax(x[0], 1)), "F.softmax");
       }},
      {"log_softmax", true, true, false, kReduction,
       [] {
         return softmax_samples(EMBER_APPLY(log_softmax(x[0])), EMBER_APPLY(log_softmax(x[0], 0)),
                                EMBER_APPLY(log_softmax(x[0], 1)), "F.log_softmax");
       }},
      {"cross_entropy", true, true, false, kReduction,
       [] { return join(cross_entropy_samples(), cross_entropy_option_samples()); }},
      // Composed of log_softmax (or the input), an embedding lookup, products and two sums.
      {"nll_loss", true, true, false, kReduction, nll_samples},
      {"mse_loss", true, true, false, kReduction, mse_samples},
      {"argmax", false, true, false, kExact,
       [] { return row_max_samples(EMBER_APPLY(argmax(x[0])), "torch.argmax(x0, -1)"); }},
      {"max", false, true, false, kExact,
       [] { return row_max_samples(EMBER_APPLY(max(x[0])), "torch.max(x0, -1).values"); }},
      // Integer counts: exact. No torch: PyTorch has no count_equal (the reference is eq and sum).
      {"count_equal", false, true, false, kExact, count_samples},
      // count·(1/rows) in float: one rounding against the reference's double. No torch: PyTorch has
      // no accuracy op.
      {"accuracy", false, true, false, kArithmetic, accuracy_samples},
  };
}

}  // namespace ember::testing
