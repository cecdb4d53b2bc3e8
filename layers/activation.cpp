// Tanh, Sigmoid, GELU, Softmax, LogSoftmax and LayerNorm, from ops.
#include "layers/activation.h"

#include <cmath>

#include "base/error.h"
#include "core/ops/ops.h"

namespace ember::nn {

Tensor ReLU::forward(const Tensor& input) { return relu(input); }

Tensor Tanh::forward(const Tensor& input) { return tanh(input); }
Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }

Tensor gelu(const Tensor& x, const std::string& approximate) {
  if (approximate == "tanh") {
    const double c = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * pow(x, 3.0))));
  }
  EMBER_CHECK(approximate == "none", ValueError, "gelu: approximate must be \"none\" or \"tanh\", got \"", approximate,
              "\"");
  return ember::gelu(x);
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

}  // namespace ember::nn
