// MaxPool2d, as torch.nn.MaxPool2d.
#pragma once

#include <cstdint>
#include <string>

#include "layers/module.h"

namespace ember::nn {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::int64_t kernel_size, std::int64_t stride = 0)
      : kernel_(kernel_size), stride_(stride > 0 ? stride : kernel_size) {}
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "MaxPool2d"; }
  ModuleKind kind() const override { return ModuleKind::max_pool2d; }
  std::string extra_repr() const override;
  std::int64_t kernel_size() const { return kernel_; }
  std::int64_t stride() const { return stride_; }

 private:
  std::int64_t kernel_, stride_;
};

}  // namespace ember::nn
