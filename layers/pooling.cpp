// MaxPool2d.
#include "layers/pooling.h"

#include "base/error.h"
#include "core/ops/ops.h"

namespace ember::nn {

Tensor MaxPool2d::forward(const Tensor& input) {
  return max_pool2d(input, static_cast<int>(kernel_), static_cast<int>(stride_));
}

std::string MaxPool2d::extra_repr() const {
  return detail::concat("kernel_size=", kernel_, ", stride=", stride_, ", padding=0, dilation=1, ceil_mode=False");
}

}  // namespace ember::nn
