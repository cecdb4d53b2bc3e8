// The loss criteria. nn::Loss is one as a value — which criterion and its arguments — that the
// training steps, fit and evaluate take (train::StepOptions::loss); CrossEntropyLoss, NLLLoss and
// MSELoss are Modules with torch.nn's names, arguments and the mean reduction, each holding one.
#pragma once

#include <optional>
#include <string>

#include "core/ops/ops.h"
#include "core/tensor/tensor.h"
#include "layers/module.h"

namespace ember::nn {

struct Loss {
  enum class Kind { cross_entropy, nll, mse };
  Kind kind = Kind::cross_entropy;
  // cross_entropy: all three; nll: the weight and ignore_index; mse: none.
  CrossEntropyOptions options = {};

  static Loss cross_entropy(CrossEntropyOptions options = {}) { return {Kind::cross_entropy, std::move(options)}; }
  static Loss nll(Tensor weight = Tensor(), std::optional<std::int64_t> ignore_index = std::nullopt) {
    return {Kind::nll, {.weight = std::move(weight), .ignore_index = ignore_index}};
  }
  static Loss mse() { return {Kind::mse, {}}; }

  // The mean loss of a batch: output and target on one device (the weight moved there if it is not).
  Tensor operator()(const Tensor& output, const Tensor& target) const;
  // Softmax cross-entropy with no weight, no ignored index and no smoothing: the one fused kernel,
  // which the fused MLP step computes itself.
  bool is_plain_cross_entropy() const;
  // As PyTorch prints the module: "CrossEntropyLoss(label_smoothing=0.1)".
  std::string describe() const;
  // Throws ValueError naming what is wrong (smoothing outside [0, 1], a weight that is not 1-D, an
  // option the criterion does not take).
  void check() const;
};

// A loss Module: called with an output and a target, not with one input (forward(input) throws).
class Criterion : public Module {
 public:
  Tensor operator()(const Tensor& input, const Tensor& target) const { return loss()(input, target); }
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  // The criterion as a value, with the weight where the module is now.
  virtual Loss loss() const = 0;
};

// torch.nn.CrossEntropyLoss(weight, ignore_index, label_smoothing), mean reduction: logits [B, C],
// class indices [B] (i32 or i64). ignore_index unset: no row is ignored (see CrossEntropyOptions).
class CrossEntropyLoss : public Criterion {
 public:
  explicit CrossEntropyLoss(Tensor weight = Tensor(), std::optional<std::int64_t> ignore_index = std::nullopt,
                            double label_smoothing = 0.0);
  std::string type_name() const override { return "CrossEntropyLoss"; }
  Loss loss() const override;

 private:
  Tensor weight_;
  std::optional<std::int64_t> ignore_index_;
  double label_smoothing_;
};

// torch.nn.NLLLoss(weight, ignore_index), mean reduction: log probabilities [B, C], class indices [B].
class NLLLoss : public Criterion {
 public:
  explicit NLLLoss(Tensor weight = Tensor(), std::optional<std::int64_t> ignore_index = std::nullopt);
  std::string type_name() const override { return "NLLLoss"; }
  Loss loss() const override;

 private:
  Tensor weight_;
  std::optional<std::int64_t> ignore_index_;
};

// torch.nn.MSELoss(), mean reduction: input and target of one shape.
class MSELoss : public Criterion {
 public:
  std::string type_name() const override { return "MSELoss"; }
  Loss loss() const override { return Loss::mse(); }
};

}  // namespace ember::nn
