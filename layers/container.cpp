// Sequential and its fused runs.
#include "layers/container.h"

#include <typeinfo>

#include "layers/activation.h"
#include "layers/conv.h"
#include "layers/linear.h"
#include "layers/pooling.h"

namespace ember::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) append(m);
}

Sequential& Sequential::append(std::shared_ptr<Module> module) {
  return append(std::to_string(size()), std::move(module));
}

Sequential& Sequential::append(const std::string& name, std::shared_ptr<Module> module) {
  register_module(name, std::move(module));
  return *this;
}

std::size_t Sequential::fuse(const FusionOptions& options) {
  const auto& children = named_children();
  fused_.assign(children.size(), 0);
  if (!fusion_enabled()) return 0;
  // The exact types, not subclasses: a subclass may override forward().
  auto is = [&](std::size_t i, const std::type_info& type) {
    if (i >= children.size()) return false;
    const Module& child = *children[i].second;
    return typeid(child) == type;
  };
  std::size_t groups = 0;
  for (std::size_t i = 0; i + 1 < children.size(); ++i) {
    if (!is(i + 1, typeid(ReLU))) continue;
    std::uint8_t with = 0;
    if (is(i, typeid(Linear)) && options.linear_relu) with = 1;
    if (is(i, typeid(Conv2d)) && options.conv2d_relu) with = 1;
    if (is(i, typeid(Conv2d)) && options.conv2d_relu_max_pool2d && is(i + 2, typeid(MaxPool2d))) with = 2;
    if (with == 0) continue;
    fused_[i] = with;
    ++groups;
    i += with;
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

}  // namespace ember::nn
