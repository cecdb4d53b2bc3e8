// The switch between ember's fused paths and the plain ones they replace, for comparison and as a
// fallback: on by default; EMBER_FUSION=0 in the environment or set_fusion_enabled(false) turns
// it off (Note [environment flags] in core/base/env.h). What it governs: whether nn::mlp and nn::cnn fuse
// their Linear→ReLU, Conv2d→ReLU and Conv2d→ReLU→MaxPool2d runs (Sequential::fuse_relu; a model
// keeps what it was built with), the optimizer's update advancing its step counts in the same CUDA
// launch, and in mnist_train the fused MLP step (train::MlpStep) and its cuBLASLt epilogues.
#pragma once

namespace ember {
void set_fusion_enabled(bool enabled);
bool fusion_enabled();

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
