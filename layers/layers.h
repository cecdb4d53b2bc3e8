// The tutorials' layers: Linear, ReLU, Flatten, Dropout, Sequential, and the CrossEntropyLoss
// criterion. Initialization follows PyTorch's defaults and draws from a seeded Generator.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "core/fusion.h"
#include "core/random.h"
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
  std::string extra_repr() const override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  std::int64_t in_, out_;
  Tensor weight_, bias_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "ReLU"; }
};

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

// Zeroes each element with probability p while training and scales the rest by 1/(1−p); the
// identity in eval mode. The masks come from a counter-based stream (the ember::dropout op)
// seeded at construction — from the default generator unless a seed is given — so runs repeat
// and the CPU and a GPU drop the same elements.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, std::optional<std::uint64_t> seed = std::nullopt);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  // How far into its random stream the layer is: a training checkpoint keeps it, so a resumed
  // run drops the same elements as an uninterrupted one.
  std::uint64_t offset() const { return offset_; }
  void set_offset(std::uint64_t offset) { offset_ = offset; }

 private:
  double p_;
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;  // elements drawn so far
};

// Whether Sequential runs a Linear followed by a ReLU as the fused linear_relu op (on by default;
// EMBER_FUSION=0 in the environment or set_fusion_enabled(false) forces the plain path): the
// switch of core/fusion.h, which governs ember's other fusions too.
using ember::fusion_enabled;
using ember::set_fusion_enabled;

// Runs its children in order; they are named "0", "1", ... as in PyTorch.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  Sequential& append(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Sequential"; }
  std::size_t size() const { return named_children().size(); }
};

// Mean softmax cross-entropy of logits [B, C] against class indices [B] (i32 or i64).
class CrossEntropyLoss {
 public:
  Tensor operator()(const Tensor& input, const Tensor& target) const;
};

}  // namespace ember::nn
