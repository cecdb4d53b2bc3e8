// Autocast: mixed precision as torch.autocast defines it. Inside a scope opened for a device type
// and a 16-bit dtype, the ops on that device follow Note [autocast policy]: products and
// convolutions cast their floating inputs to the 16-bit dtype and compute in it, losses (and on
// CUDA a few precision-sensitive ops) cast to f32, and every other op runs in its inputs' dtype.
// Parameters stay f32 — the optimizer's master weights — and the casts are differentiable, so
// their gradients come back in f32.
//
//   Tensor loss;
//   {
//     auto scope = ember::autocast(Device::cpu(), DType::bf16);
//     loss = cross_entropy(model(x), y);  // Linear in bf16, the loss in f32
//   }
//   loss.backward();                      // f32 gradients for the f32 parameters
//
// Note [autocast policy]
// Each op's policy per device type is on its line of the op list (core/ops/op_list.h), copied
// from PyTorch 2.15 (the CPU lists of ATen/autocast_mode.cpp, the CUDA lists of
// ATen/autocast_mode.h) for the ops ember has; docs/ops.md prints it and
// tests/interop/autocast_torch.py compares it with an installed PyTorch op by op.
//   - lower_precision: floating inputs other than f64 are cast to the scope's dtype;
//   - fp32: bf16/f16 inputs are cast to f32 (the result is f32);
//   - promote: floating inputs are cast to the widest floating dtype among them;
//   - none: the op runs in its inputs' dtype (a bf16 op computes in f32 and rounds once,
//     Note [half precision]).
// Only floating inputs are cast; integer targets and masks pass as they are. A lower_precision
// cast of a parameter (a leaf that requires grad) is cached for the outermost scope, as PyTorch
// caches it, so a weight used twice is cast once: open a scope per step (the forward pass and
// the loss inside it; the backward pass and the optimizer's step after it). The backward pass
// runs with autocast off (the gradients follow the forward's dtypes), as PyTorch's engine does.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

#include "core/ops/op_list.h"
#include "core/tensor/autocast_state.h"
#include "core/tensor/tensor.h"

namespace ember {

std::string_view cast_policy_name(CastPolicy policy);
// An op's policy on a device's type (op_key("fused::linear_relu") finds an op by its spelling).
CastPolicy autocast_policy(OpKey op, Device device);

// Turns autocast on (or, with enabled = false, off) for one device type until the scope ends, and
// restores what was there before, exceptions included. dtype is bf16 or f16 (f16 on the CPU is
// storage only: its products compute in f32, Note [half precision]). Scopes nest.
class AutocastScope {
 public:
  AutocastScope(Device device, DType dtype, bool enabled = true);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  DeviceType type_;
  bool counted_;  // an enabled scope: it holds the cast cache open
  bool was_enabled_;
  DType was_dtype_;
};

// `auto scope = ember::autocast(device, dtype);` The dtype defaults as PyTorch's do: bf16 on the
// CPU, f16 on CUDA.
[[nodiscard]] inline AutocastScope autocast(Device device, DType dtype, bool enabled = true) {
  return AutocastScope(device, dtype, enabled);
}
[[nodiscard]] inline AutocastScope autocast(Device device) {
  return AutocastScope(device, device.is_cuda() ? DType::f16 : DType::bf16);
}

namespace ext {

// An op's inputs as its policy casts them on their device, when autocast is on there. An op on
// one of the lists starts with
//   if (const ext::AutocastInputs cast{OpKey::linear, {&input, &weight, &bias}})
//     return linear(cast[0], cast[1], cast[2]);
// which calls itself again with the cast inputs only when a cast changed something (the second
// call finds nothing to change and runs the op). An extension's op, which has no OpKey, gives its
// policies itself: AutocastInputs{OpPolicy{CastPolicy::lower_precision, CastPolicy::lower_precision}, {...}}.
class AutocastInputs {
 public:
  AutocastInputs(OpKey op, std::initializer_list<const Tensor*> inputs) : AutocastInputs(op_entry(op).policy, inputs) {}
  AutocastInputs(OpKey op, std::span<const Tensor> inputs) : AutocastInputs(op_entry(op).policy, inputs) {}  // cat
  AutocastInputs(OpPolicy policy, std::initializer_list<const Tensor*> inputs);
  AutocastInputs(OpPolicy policy, std::span<const Tensor> inputs);
  explicit operator bool() const { return changed_; }
  const Tensor& operator[](std::size_t i) const { return cast_.at(i); }
  const std::vector<Tensor>& all() const { return cast_; }

 private:
  void apply(OpPolicy policy);

  std::vector<Tensor> cast_;
  bool changed_ = false;
};

}  // namespace ext
}  // namespace ember
