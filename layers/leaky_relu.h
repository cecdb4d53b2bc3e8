// LeakyReLU: the module over the elementwise op ember::leaky_relu (core/ops/ops.h), whose formula is
// one line of kernels/elementwise_math.h — the worked example of adding an elementwise op in
// docs/writing-a-layer.md.
#pragma once

#include "core/ops/ops.h"
#include "layers/module.h"

namespace ember::nn {

using ember::leaky_relu;

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
