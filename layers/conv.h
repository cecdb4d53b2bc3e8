// Conv2d, as torch.nn.Conv2d, with PyTorch's initialization and state_dict names, so checkpoints move between ember and
// PyTorch.
#pragma once

#include "core/tensor/random.h"
#include "layers/module.h"
#include "layers/pooling.h"

namespace ember::nn {

// Cross-correlation with a [out, in, k, k] weight; weight and bias ~ U(±1/√(in·k·k)), PyTorch's
// default (kaiming_uniform_ with a = √5), drawn in that order from `generator`.
class Conv2d : public Module {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, std::int64_t stride = 1,
         std::int64_t padding = 0, bool bias = true, Generator* generator = nullptr);
  Tensor forward(const Tensor& input) override;
  // relu(forward(input)) as one op (conv2d_relu); Sequential uses it for a Conv2d followed by a
  // ReLU. Checks the input's device like operator().
  Tensor forward_relu(const Tensor& input);
  // pool(relu(forward(input))) as one op (conv2d_relu_max_pool2d); Sequential uses it for a
  // Conv2d, a ReLU and a MaxPool2d in a row.
  Tensor forward_relu_max_pool(const Tensor& input, const MaxPool2d& pool);
  std::string type_name() const override { return "Conv2d"; }
  ModuleKind kind() const override { return ModuleKind::conv2d; }
  std::string extra_repr() const override;
  const Tensor& weight() const { return weight_; }

 private:
  void check_shape(const Tensor& input) const;
  std::int64_t in_, out_, kernel_, stride_, padding_;
  Tensor weight_, bias_;
};

}  // namespace ember::nn
