// The built-in layers.
#include "layers/linear.h"

#include <typeinfo>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "layers/conv.h"

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
  return bias_.defined() ? linear_relu(input, weight_, bias_) : relu(linear(input, weight_));
}

std::string Linear::extra_repr() const {
  std::ostringstream out;
  out << "in_features=" << in_ << ", out_features=" << out_ << ", bias=" << (bias_.defined() ? "True" : "False");
  return out.str();
}

Tensor ReLU::forward(const Tensor& input) { return relu(input); }

Tensor Flatten::forward(const Tensor& input) { return input.flatten(start_dim_); }
std::string Flatten::extra_repr() const { return detail::concat("start_dim=", start_dim_, ", end_dim=-1"); }

Dropout::Dropout(double p, std::optional<std::uint64_t> seed)
    : p_(p), seed_(seed ? *seed : default_generator().next_u64()) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, ValueError, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& input) {
  if (!is_training() || p_ == 0.0) return input;
  const std::uint64_t offset = offset_;
  offset_ += static_cast<std::uint64_t>(input.numel());
  return dropout(input, p_, seed_, offset);
}

std::string Dropout::extra_repr() const { return detail::concat("p=", p_, ", inplace=False"); }

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) append(m);
}

Sequential& Sequential::append(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
  return *this;
}

std::size_t Sequential::fuse_relu() {
  const auto& children = named_children();
  fused_.assign(children.size(), 0);
  // The exact types, not subclasses: a subclass may override forward().
  auto is = [&](std::size_t i, const std::type_info& type) {
    if (i >= children.size()) return false;
    const Module& child = *children[i].second;
    return typeid(child) == type;
  };
  std::size_t groups = 0;
  for (std::size_t i = 0; i + 1 < children.size(); ++i) {
    if (!(is(i, typeid(Linear)) || is(i, typeid(Conv2d))) || !is(i + 1, typeid(ReLU))) continue;
    fused_[i] = is(i, typeid(Conv2d)) && is(i + 2, typeid(MaxPool2d)) ? 2 : 1;
    ++groups;
    i += fused_[i];
  }
  return groups;
}

void Sequential::unfuse() { fused_.clear(); }

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  const auto& children = named_children();
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (const std::size_t with = fused_with(i)) {
      // Linear or Conv2d, then ReLU (and a MaxPool2d): one op.
      Module& layer = *children[i].second;
      if (with == 2)
        x = static_cast<Conv2d&>(layer).forward_relu_max_pool(x,
                                                              static_cast<const MaxPool2d&>(*children[i + 2].second));
      else
        x = typeid(layer) == typeid(Linear) ? static_cast<Linear&>(layer).forward_relu(x)
                                            : static_cast<Conv2d&>(layer).forward_relu(x);
      i += with;
      continue;
    }
    x = (*children[i].second)(x);
  }
  return x;
}

Tensor CrossEntropyLoss::operator()(const Tensor& input, const Tensor& target) const {
  ext::check_same_device("CrossEntropyLoss", {{"input", input}, {"target", target}});
  return cross_entropy(input, target);
}

}  // namespace ember::nn
