// Which of ember's fused paths run. Each optimization is a named choice in the options of what it
// belongs to — FusionOptions below for a model's layers (Sequential::fuse, nn::mlp, nn::cnn),
// train::FusedMlpStepOptions for the fused MLP training step — so a program says what it opts
// into. A choice that keeps values and gradients bit for bit is on by default; one that changes
// rounding, or what .grad holds, is off until asked for, and says so where it is declared.
//
// Note [fusion off-switch]
// EMBER_FUSION=0 in the environment (Note [environment flags] in base/env.h) or
// set_fusion_enabled(false) turns every fused path off, whatever the options ask: models are
// built unfused, the fused MLP step runs its plain kernels, and the optimizers advance their step
// counts in a launch of their own. It is for debugging and for comparing with the plain paths,
// not a setting to train with.
#pragma once

namespace ember {

// A model's fused layer runs (Sequential::fuse).
struct FusionOptions {
  // Conv2d→ReLU as fused::conv2d_relu: the ReLU applied while each image's output is in cache.
  // The same values and gradients, bit for bit.
  bool conv2d_relu = true;
  // Conv2d→ReLU→MaxPool2d as fused::conv2d_relu_max_pool2d (on the CPU's Winograd path the
  // convolution's output is never stored). The same values and gradients, bit for bit.
  bool conv2d_relu_max_pool2d = true;
  // Linear→ReLU as fused::linear_relu: the bias and the ReLU in one pass after the GEMM. The bias
  // is added after the product instead of inside the GEMM, which rounds differently (within
  // 1e-6 relative), so it is opt-in.
  bool linear_relu = false;

  static FusionOptions none() { return {.conv2d_relu = false, .conv2d_relu_max_pool2d = false, .linear_relu = false}; }
  static FusionOptions all() { return {.conv2d_relu = true, .conv2d_relu_max_pool2d = true, .linear_relu = true}; }
};

void set_fusion_enabled(bool enabled);
bool fusion_enabled();  // false after EMBER_FUSION=0 or set_fusion_enabled(false)

// Sets the switch for a scope and restores what it was at the scope's end, exceptions included:
// how tests (and programs comparing both paths) toggle it without leaking the setting.
class FusionScope {
 public:
  explicit FusionScope(bool enabled) : before_(fusion_enabled()) { set_fusion_enabled(enabled); }
  ~FusionScope() { set_fusion_enabled(before_); }
  FusionScope(const FusionScope&) = delete;
  FusionScope& operator=(const FusionScope&) = delete;

 private:
  bool before_;
};

}  // namespace ember
