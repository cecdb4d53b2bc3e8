// Linear.
#include "layers/linear.h"

#include <cmath>
#include <sstream>

#include "core/ops/fused.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"

namespace ember::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias, Generator* generator)
    : in_(in_features), out_(out_features) {
  EMBER_CHECK(in_features > 0 && out_features > 0, ValueError,
              "Linear: in_features and out_features must be "
              "positive, got ",
              in_features, " and ", out_features);
  Generator& g = generator ? *generator : default_generator();
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight_ = register_parameter("weight", uniform({out_features, in_features}, -bound, bound, {}, &g));
  if (bias) bias_ = register_parameter("bias", uniform({out_features}, -bound, bound, {}, &g));
}

Tensor Linear::forward(const Tensor& input) {
  check_input_shape(input.dim() >= 1 && input.size(-1) == in_, input,
                    detail::concat("an input whose last dim is in_features = ", in_));
  return linear(input, weight_, bias_);
}

Tensor Linear::forward_relu(const Tensor& input) {
  check_input_device(input);
  check_input_shape(input.dim() >= 1 && input.size(-1) == in_, input,
                    detail::concat("an input whose last dim is in_features = ", in_));
  return bias_.defined() ? fused::linear_relu(input, weight_, bias_) : relu(linear(input, weight_));
}

std::string Linear::extra_repr() const {
  std::ostringstream out;
  out << "in_features=" << in_ << ", out_features=" << out_ << ", bias=" << (bias_.defined() ? "True" : "False");
  return out.str();
}

}  // namespace ember::nn
