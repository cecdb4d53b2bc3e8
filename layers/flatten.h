// Flatten, as torch.nn.Flatten.
#pragma once

#include <string>

#include "layers/module.h"

namespace ember::nn {

// Flattens dims start_dim.. into one: [B, 1, 28, 28] → [B, 784] with the default start_dim 1.
class Flatten : public Module {
 public:
  explicit Flatten(int start_dim = 1) : start_dim_(start_dim) {}
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;

 private:
  int start_dim_;
};

}  // namespace ember::nn
