// The activation modules a PyTorch user reaches for, under PyTorch's names: ReLU, Tanh, Sigmoid,
// GELU (exact or tanh), Softmax and LogSoftmax (LeakyReLU, the worked example of adding an op, in
// layers/leaky_relu.h). Each is written with ember's ops (docs/writing-a-layer.md, route 1),
// so autograd and both devices come with them.
#pragma once

#include <string>
#include <vector>

#include "layers/module.h"

namespace ember::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "ReLU"; }
  ModuleKind kind() const override { return ModuleKind::relu; }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Tanh"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Sigmoid"; }
};

// x·Φ(x) with Φ the standard normal CDF — exactly, ½x(1 + erf(x/√2)), or with approximate
// "tanh", ½x(1 + tanh(√(2/π)(x + 0.044715x³))), as torch.nn.GELU(approximate=...).
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override;

 private:
  std::string approximate_;
};

// The exact and the tanh-approximated GELU as functions.
Tensor gelu(const Tensor& input, const std::string& approximate = "none");

class Softmax : public Module {
 public:
  explicit Softmax(int dim = -1) : dim_(dim) {}
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Softmax"; }
  std::string extra_repr() const override;

 private:
  int dim_;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int dim = -1) : dim_(dim) {}
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override;

 private:
  int dim_;
};

}  // namespace ember::nn
