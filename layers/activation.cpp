// Tanh, Sigmoid, GELU, Softmax, LogSoftmax and LayerNorm, from ops.
#include "layers/activation.h"

#include <cmath>

#include "core/base/error.h"
#include "core/ops/ops.h"

namespace ember::nn {

Tensor Tanh::forward(const Tensor& input) { return tanh(input); }
Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }

Tensor gelu(const Tensor& x, const std::string& approximate) {
  if (approximate == "tanh") {
    const double c = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * pow(x, 3.0))));
  }
  EMBER_CHECK(approximate == "none", ValueError, "gelu: approximate must be \"none\" or \"tanh\", got \"", approximate,
              "\"");
  return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
}

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  EMBER_CHECK(approximate_ == "none" || approximate_ == "tanh", ValueError,
              "GELU: approximate must be \"none\" or \"tanh\", got \"", approximate_, "\"");
}
Tensor GELU::forward(const Tensor& input) { return gelu(input, approximate_); }
std::string GELU::extra_repr() const { return "approximate='" + approximate_ + "'"; }

Tensor Softmax::forward(const Tensor& input) { return softmax(input, dim_); }
std::string Softmax::extra_repr() const { return detail::concat("dim=", dim_); }
Tensor LogSoftmax::forward(const Tensor& input) { return log_softmax(input, dim_); }
std::string LogSoftmax::extra_repr() const { return detail::concat("dim=", dim_); }

LayerNorm::LayerNorm(std::vector<std::int64_t> normalized_shape, double eps, bool elementwise_affine)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  EMBER_CHECK(!shape_.empty(), ValueError, "LayerNorm: normalized_shape is empty");
  for (std::int64_t d : shape_)
    EMBER_CHECK(d > 0, ValueError, "LayerNorm: normalized_shape must be positive, got ", shape_str(shape_));
  EMBER_CHECK(eps >= 0, ValueError, "LayerNorm: eps must be non-negative, got ", eps);
  if (elementwise_affine) {
    weight_ = register_parameter("weight", ones(shape_));
    bias_ = register_parameter("bias", zeros(shape_));
  }
}

Tensor LayerNorm::forward(const Tensor& input) {
  const int k = static_cast<int>(shape_.size());
  bool trailing = input.dim() >= k;
  for (int i = 0; trailing && i < k; ++i) trailing = input.size(i - k) == shape_[static_cast<std::size_t>(i)];
  check_input_shape(trailing, input, "an input ending in normalized_shape " + shape_str(shape_));
  std::vector<int> dims;
  for (int i = -k; i < 0; ++i) dims.push_back(i);
  const Tensor centered = input - mean(input, dims, true);
  const Tensor normalized = centered * rsqrt(var(input, dims, 0, true) + eps_);
  return weight_.defined() ? normalized * weight_ + bias_ : normalized;
}

std::string LayerNorm::extra_repr() const {
  std::string dims;
  for (std::int64_t d : shape_) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  return detail::concat("(", dims, shape_.size() == 1 ? ",)" : ")", ", eps=", eps_,
                        ", elementwise_affine=", weight_.defined() ? "True" : "False");
}

}  // namespace ember::nn
