// The convolutional layers of the tutorials: Conv2d, MaxPool2d and BatchNorm2d, with PyTorch's
// initialization and state_dict names, so checkpoints move between ember and PyTorch.
#pragma once

#include "core/tensor/random.h"
#include "layers/module.h"

namespace ember::nn {

class MaxPool2d;

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
  std::string extra_repr() const override;
  const Tensor& weight() const { return weight_; }

 private:
  void check_shape(const Tensor& input) const;
  std::int64_t in_, out_, kernel_, stride_, padding_;
  Tensor weight_, bias_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::int64_t kernel_size, std::int64_t stride = 0)
      : kernel_(kernel_size), stride_(stride > 0 ? stride : kernel_size) {}
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  std::int64_t kernel_size() const { return kernel_; }
  std::int64_t stride() const { return stride_; }

 private:
  std::int64_t kernel_, stride_;
};

// Per-channel normalization with learned scale and shift. Buffers running_mean, running_var and
// the i64 num_batches_tracked, under PyTorch's names.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;

 private:
  std::int64_t features_;
  double eps_, momentum_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

}  // namespace ember::nn
