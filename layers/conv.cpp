// Conv2d.
#include "layers/conv.h"

#include <cmath>

#include "core/ops/fused.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"

namespace ember::nn {

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, std::int64_t stride,
               std::int64_t padding, bool bias, Generator* generator)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), stride_(stride), padding_(padding) {
  EMBER_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && stride > 0 && padding >= 0, ValueError,
              "Conv2d: channels, kernel size and stride must be positive and padding non-negative");
  Generator& g = generator ? *generator : default_generator();
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels * kernel_size * kernel_size));
  weight_ = register_parameter("weight",
                               uniform({out_channels, in_channels, kernel_size, kernel_size}, -bound, bound, {}, &g));
  if (bias) bias_ = register_parameter("bias", uniform({out_channels}, -bound, bound, {}, &g));
}

Tensor Conv2d::forward(const Tensor& input) {
  check_shape(input);
  return conv2d(input, weight_, bias_, static_cast<int>(stride_), static_cast<int>(padding_));
}

Tensor Conv2d::forward_relu(const Tensor& input) {
  check_input_device(input);
  check_shape(input);
  return fused::conv2d_relu(input, weight_, bias_, static_cast<int>(stride_), static_cast<int>(padding_));
}

Tensor Conv2d::forward_relu_max_pool(const Tensor& input, const MaxPool2d& pool) {
  check_input_device(input);
  check_shape(input);
  return fused::conv2d_relu_max_pool2d(input, weight_, bias_, static_cast<int>(stride_), static_cast<int>(padding_),
                                       static_cast<int>(pool.kernel_size()), static_cast<int>(pool.stride()));
}

void Conv2d::check_shape(const Tensor& input) const {
  check_input_shape(input.dim() == 4 && input.size(1) == in_, input,
                    detail::concat("[N, ", in_, " (in_channels), H, W]"));
}

std::string Conv2d::extra_repr() const {
  return detail::concat(in_, ", ", out_, ", kernel_size=(", kernel_, ", ", kernel_, "), stride=(", stride_, ", ",
                        stride_, ")", padding_ ? detail::concat(", padding=(", padding_, ", ", padding_, ")") : "",
                        bias_.defined() ? "" : ", bias=False");
}

}  // namespace ember::nn
