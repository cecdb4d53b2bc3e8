// LeakyReLU: a layer with its own CPU and CUDA kernels (kernels/leaky_relu.h) and its own
// derivative rule — the worked example of route 2 in docs/writing-a-layer.md.
#pragma once

#include "layers/module.h"

namespace ember::nn {

// The differentiable op: max(x, 0) + slope·min(x, 0).
Tensor leaky_relu(const Tensor& input, double negative_slope = 0.01);

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : slope_(negative_slope) {}
  Tensor forward(const Tensor& input) override { return leaky_relu(input, slope_); }
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;

 private:
  double slope_;
};

}  // namespace ember::nn
