// The tutorials' layers: Linear, ReLU, Flatten, Dropout, Sequential, and the CrossEntropyLoss
// criterion. Initialization follows PyTorch's defaults and draws from a seeded Generator.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "core/base/fusion.h"
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

// The switch of core/base/fusion.h (EMBER_FUSION=0 turns ember's fusions off), which the model
// builders consult before fusing Linear→ReLU pairs (Sequential::fuse_linear_relu).
using ember::fusion_enabled;
using ember::set_fusion_enabled;

// Runs its children in order; they are named "0", "1", ... as in PyTorch.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);  // Sequential{a, b, c}
  // std::make_shared<nn::Sequential>(a, b, c), as the initializer list cannot pass through
  // make_shared; each argument a shared_ptr to a Module.
  template <class... Modules>
  requires(sizeof...(Modules) > 0 &&
           (std::is_base_of_v<Module, Modules> && ...)) explicit Sequential(std::shared_ptr<Modules>... modules)
      : Sequential({std::static_pointer_cast<Module>(std::move(modules))...}) {}
  Sequential& append(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Sequential"; }
  std::size_t size() const { return named_children().size(); }

  // From now on, runs each Linear or Conv2d followed by a ReLU as one fused op, linear_relu or
  // conv2d_relu (the ReLU applied while the layer's output is in cache; the same values and
  // gradients), and a Conv2d, ReLU, MaxPool2d in a row as conv2d_relu_max_pool2d. Only plain
  // nn::Linear/nn::Conv2d/nn::ReLU/nn::MaxPool2d are fused — a subclass's own forward always
  // runs — and the children and their names stay as they are. Returns the number of groups
  // fused. nn::mlp and nn::cnn call it when fusion_enabled(); layers appended later run unfused
  // until it is called again. unfuse() undoes it.
  std::size_t fuse_relu();
  void unfuse();
  // Whether child `index` is a Linear or Conv2d that runs fused with the layers after it, and
  // with how many of them (1: the ReLU; 2: the ReLU and a MaxPool2d).
  bool fused_at(std::size_t index) const { return fused_with(index) > 0; }
  std::size_t fused_with(std::size_t index) const { return index < fused_.size() ? fused_[index] : 0; }

 private:
  std::vector<std::uint8_t> fused_;
};

// Mean softmax cross-entropy of logits [B, C] against class indices [B] (i32 or i64).
class CrossEntropyLoss {
 public:
  Tensor operator()(const Tensor& input, const Tensor& target) const;
};

}  // namespace ember::nn
