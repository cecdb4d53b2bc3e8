// The op table's shape ops and the Tensor methods docs/ops.md lists among the ops: views,
// copies, concatenation, conversions and fills. Every one moves or converts values without
// arithmetic, so every one gives the same bits on every device (kExact).
#include <cmath>

#include "core/ops/ops.h"
#include "support/op_samples.h"

namespace ember::testing {
namespace {

const double kInf = INFINITY, kNan = NAN;

OpInfo op(std::string name, bool differentiable, std::function<std::vector<Sample>()> samples,
          Tolerance grad_tolerance = kExact) {
  return {std::move(name), differentiable, true, false, kExact, std::move(samples), grad_tolerance};
}

Tensor ints(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return values_input(values, shape).to(dtype);
}

std::vector<Sample> cat_samples() {
  return {
      call("[3, 4] and [3, 1] along dim 1", {random_input({3, 4}, 1), random_input({3, 1}, 2)},
           EMBER_APPLY(cat({x[0], x[1]}, 1)), "torch.cat([x0, x1], 1)"),
      call("three along dim 0, one empty", {random_input({1, 4}, 3), random_input({0, 4}, 4), random_input({2, 4}, 5)},
           EMBER_APPLY(cat({x[0], x[1], x[2]}, 0)), "torch.cat([x0, x1, x2], 0)"),
      call("[2, 3, 4] and [2, 2, 4] along dim 1", {random_input({2, 3, 4}, 6), random_input({2, 2, 4}, 7)},
           EMBER_APPLY(cat({x[0], x[1]}, 1)), "torch.cat([x0, x1], 1)"),
      call("i64 [2, 2] and [1, 2]", {ints({1, -2, 3, 4}, {2, 2}, DType::i64), ints({5, 6}, {1, 2}, DType::i64)},
           EMBER_APPLY(cat({x[0], x[1]}, 0)), "torch.cat([x0, x1], 0)"),
      call("[37, 45] twice along dim 0", {random_input(kLarge, 8), random_input(kLarge, 9)},
           EMBER_APPLY(cat({x[0], x[1]}, 0)), "torch.cat([x0, x1], 0)"),
  };
}

// Conversions by kernels::cast_formula (docs/ops.md, "Conversions between element types"): toward
// zero, saturating where C++ leaves it undefined (NaN → 0). PyTorch leaves those undefined, so
// they have no torch spelling.
std::vector<Sample> to_samples() {
  auto cast = [](DType dtype) { return [dtype](const std::vector<Tensor>& x) { return x[0].to(dtype); }; };
  auto sample = [](std::string label, Tensor input, OpFn apply, std::string torch) {
    return Sample{.label = std::move(label),
                  .inputs = {std::move(input)},
                  .apply = std::move(apply),
                  .no_grad = true,
                  .torch = std::move(torch)};
  };
  return {
      // The device move alone is differentiable.
      call("to the CPU (from the device under test)", {random_input({3, 4}, 10)}, EMBER_APPLY(x[0].to(Device::cpu())),
           "x0.cpu()"),
      sample("to i32, toward zero", values_input({2.7, -2.7, 0.5, -0.0, 1e6, -123}, {6}), cast(DType::i32),
             "x0.to(torch.int32)"),
      sample("to i32, saturating", values_input({kNan, 1e10, -1e10, kInf, -kInf}, {5}), cast(DType::i32), ""),
      sample("to u8, saturating", values_input({300, -5, 2.9, 255, kNan}, {5}), cast(DType::u8), ""),
      sample("to i64", values_input({kInf, -3.5, 4e15, kNan}, {4}), cast(DType::i64), ""),
      sample("to f32", random_input({3, 4}, 11), cast(DType::f32), "x0.to(torch.float32)"),
      sample("i32 to u8, wrapping", ints({300, -1, 7}, {3}, DType::i32), cast(DType::u8), ""),
      sample("i64 to f64", ints({-3, 1 << 20}, {2}, DType::i64), cast(DType::f64), "x0.to(torch.float64)"),
      sample("[37, 45] to i64", random_input(kLarge, 12, -100, 100), cast(DType::i64), "x0.to(torch.int64)"),
  };
}

// The in-place fills and copies on a copy of the input (which stays as it was).
Tensor filled(const std::vector<Tensor>& x) { return x[0].clone().fill_(2.5); }
Tensor saturated(const std::vector<Tensor>& x) { return x[0].clone().fill_(1e10); }
Tensor zeroed(const std::vector<Tensor>& x) { return x[0].clone().zero_(); }
// Into a tensor on the CPU, from the device under test; and into one on that device.
Tensor copied_to_cpu(const std::vector<Tensor>& x) { return zeros(x[0].shape(), {.dtype = x[0].dtype()}).copy_(x[0]); }
Tensor copied_on_device(const std::vector<Tensor>& x) {
  return zeros(x[0].shape(), {.dtype = x[0].dtype(), .device = x[0].device()}).copy_(x[0]);
}

}  // namespace

std::vector<OpInfo> shape_ops() {
  return {
      op("transpose", true,
         [] {
           const OpFn apply = EMBER_APPLY(transpose(x[0]));
           return std::vector<Sample>{call("[3, 4]", {random_input({3, 4}, 20)}, apply, "x0.transpose(-2, -1)"),
                                      call("[2, 3, 4]", {random_input({2, 3, 4}, 21)}, apply, "x0.transpose(-2, -1)"),
                                      call("[37, 45]", {random_input(kLarge, 22)}, apply, "x0.transpose(-2, -1)")};
         }),
      op("reshape", true,
         [] {
           return std::vector<Sample>{call("[3, 4] as [4, 3]", {random_input({3, 4}, 23)},
                                           EMBER_APPLY(reshape(x[0], {4, 3})), "x0.reshape(4, 3)"),
                                      call("[2, 3, 4] as [−1, 4]", {random_input({2, 3, 4}, 24)},
                                           EMBER_APPLY(x[0].reshape({-1, 4})), "x0.reshape(-1, 4)"),
                                      call("[37, 45] as [45, 37]", {random_input(kLarge, 25)},
                                           EMBER_APPLY(reshape(x[0], {45, 37})), "x0.reshape(45, 37)")};
         }),
      op("view", true,
         [] {
           return std::vector<Sample>{
               call("[3, 4] as [2, 6]", {random_input({3, 4}, 26)}, EMBER_APPLY(x[0].view({2, 6})), "x0.view(2, 6)")};
         }),
      op("flatten", true,
         [] {
           return std::vector<Sample>{
               call("[2, 3, 4]", {random_input({2, 3, 4}, 27)}, EMBER_APPLY(x[0].flatten()), "x0.flatten()"),
               call("[2, 3, 4] from dim 1", {random_input({2, 3, 4}, 28)}, EMBER_APPLY(x[0].flatten(1)),
                    "x0.flatten(1)")};
         }),
      op("unsqueeze", true,
         [] {
           return std::vector<Sample>{
               call("[3, 4] at 1", {random_input({3, 4}, 29)}, EMBER_APPLY(unsqueeze(x[0], 1)), "x0.unsqueeze(1)"),
               call("[4, 5] at −1", {random_input({4, 5}, 30)}, EMBER_APPLY(unsqueeze(x[0], -1)), "x0.unsqueeze(-1)"),
               call("a scalar at 0", {random_input({}, 31)}, EMBER_APPLY(unsqueeze(x[0], 0)), "x0.unsqueeze(0)")};
         }),
      op("narrow", true,
         [] {
           return std::vector<Sample>{call("rows 1–2 of [3, 4]", {random_input({3, 4}, 32)},
                                           EMBER_APPLY(x[0].narrow(0, 1, 2)), "x0.narrow(0, 1, 2)"),
                                      call("none of [3, 4]", {random_input({3, 4}, 33)},
                                           EMBER_APPLY(x[0].narrow(0, 3, 0)), "x0.narrow(0, 3, 0)")};
         }),
      op("permute", true,
         [] {
           return std::vector<Sample>{call("[2, 3, 4] to {2, 0, 1}", {random_input({2, 3, 4}, 34)},
                                           EMBER_APPLY(permute(x[0], {2, 0, 1})), "x0.permute(2, 0, 1)"),
                                      call("[2, 3, 4, 5] to {0, 2, 3, 1}", {random_input({2, 3, 4, 5}, 35)},
                                           EMBER_APPLY(permute(x[0], {0, 2, 3, 1})), "x0.permute(0, 2, 3, 1)"),
                                      call("[37, 45] to {1, 0}", {random_input(kLarge, 36)},
                                           EMBER_APPLY(permute(x[0], {1, 0})), "x0.permute(1, 0)")};
         }),
      // The gradient sums over the broadcast dims.
      op(
          "broadcast_to", true,
          [] {
            return std::vector<Sample>{
                call("[3, 1] to [2, 3, 4]", {random_input({3, 1}, 37)}, EMBER_APPLY(broadcast_to(x[0], {2, 3, 4})),
                     "torch.broadcast_to(x0, (2, 3, 4))"),
                call("a scalar to [2, 2]", {random_input({}, 38)}, EMBER_APPLY(broadcast_to(x[0], {2, 2})),
                     "torch.broadcast_to(x0, (2, 2))"),
                call("[45] to [37, 45]", {random_input({45}, 39)}, EMBER_APPLY(broadcast_to(x[0], kLarge)),
                     "torch.broadcast_to(x0, (37, 45))")};
          },
          kReduction),
      op("cat", true, cat_samples),
      op("slice", true,
         [] {
           return std::vector<Sample>{call("dim 1 of [3, 4]", {random_input({3, 4}, 40)},
                                           EMBER_APPLY(slice(x[0], 1, 1, 2)), "x0.narrow(1, 1, 2)"),
                                      call("dim 0 of [3, 4]", {random_input({3, 4}, 41)},
                                           EMBER_APPLY(slice(x[0], 0, 1, 2)), "x0.narrow(0, 1, 2)"),
                                      call("dim 2 of [2, 3, 5]", {random_input({2, 3, 5}, 42)},
                                           EMBER_APPLY(slice(x[0], 2, 1, 3)), "x0.narrow(2, 1, 3)"),
                                      call("dim 1 of [37, 45]", {random_input(kLarge, 43)},
                                           EMBER_APPLY(slice(x[0], 1, 3, 9)), "x0.narrow(1, 3, 9)")};
         }),
      op("clone", true,
         [] {
           return std::vector<Sample>{
               call("[3, 4]", {random_input({3, 4}, 44)}, EMBER_APPLY(x[0].clone()), "x0.clone()"),
               call("u8", {ints({0, 255, 7}, {3}, DType::u8)}, EMBER_APPLY(x[0].clone()), "x0.clone()"),
               call("[37, 45]", {random_input(kLarge, 45)}, EMBER_APPLY(x[0].clone()), "x0.clone()")};
         }),
      op("to", true, to_samples),
      op("fill_", false,
         [] {
           return std::vector<Sample>{
               call("[3, 4] with 2.5", {random_input({3, 4}, 46)}, filled, "x0.clone().fill_(2.5)"),
               call("i32 with 1e10 (saturating)", {ints({1, 2, 3}, {3}, DType::i32)}, saturated, ""),
               call("[37, 45] with 2.5", {random_input(kLarge, 47)}, filled, "x0.clone().fill_(2.5)")};
         }),
      op("zero_", false,
         [] {
           return std::vector<Sample>{call("[3, 4]", {random_input({3, 4}, 48)}, zeroed, "x0.clone().zero_()")};
         }),
      op("copy_", false,
         [] {
           return std::vector<Sample>{
               call("into the CPU", {random_input({3, 4}, 49)}, copied_to_cpu, "torch.zeros_like(x0).copy_(x0)"),
               call("on the device", {random_input({3, 4}, 50)}, copied_on_device, "torch.zeros_like(x0).copy_(x0)"),
               call("i64 on the device", {ints({-1, 1LL << 40}, {2}, DType::i64)}, copied_on_device,
                    "torch.zeros_like(x0).copy_(x0)"),
               call("[37, 45] into the CPU", {random_input(kLarge, 51)}, copied_to_cpu,
                    "torch.zeros_like(x0).copy_(x0)")};
         }),
  };
}

}  // namespace ember::testing
