// Linear, as torch.nn.Linear: PyTorch's layout, initialization and state_dict names, drawn from a
// seeded Generator so one seed gives one model.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor/random.h"
#include "layers/module.h"

namespace ember::nn {

// y = x·Wᵀ + b with W [out, in] (PyTorch's layout). W ~ U(±1/√in) — PyTorch's
// kaiming_uniform_(a=√5) — and b ~ U(±1/√in), drawn in that order from `generator` (the default
// generator when null), so one seed gives one model.
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true, Generator* generator = nullptr);
  Tensor forward(const Tensor& input) override;
  // relu(forward(input)) as one fused op (bias and ReLU in one pass); Sequential uses it for a
  // Linear followed by a ReLU. Checks the input's device like operator().
  Tensor forward_relu(const Tensor& input);
  std::string type_name() const override { return "Linear"; }
  ModuleKind kind() const override { return ModuleKind::linear; }
  std::string extra_repr() const override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  std::int64_t in_, out_;
  Tensor weight_, bias_;
};

}  // namespace ember::nn
