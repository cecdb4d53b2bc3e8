// LayerNorm and BatchNorm2d.
#include "layers/normalization.h"

#include "base/error.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"

namespace ember::nn {

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
  return layer_norm(input, shape_, weight_, bias_, eps_);
}

std::string LayerNorm::extra_repr() const {
  std::string dims;
  for (std::int64_t d : shape_) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  return detail::concat("(", dims, shape_.size() == 1 ? ",)" : ")", ", eps=", eps_,
                        ", elementwise_affine=", weight_.defined() ? "True" : "False");
}

BatchNorm2d::BatchNorm2d(std::int64_t num_features, double eps, double momentum)
    : features_(num_features), eps_(eps), momentum_(momentum) {
  EMBER_CHECK(num_features > 0, ValueError, "BatchNorm2d: num_features must be positive");
  weight_ = register_parameter("weight", ones({num_features}));
  bias_ = register_parameter("bias", zeros({num_features}));
  running_mean_ = register_buffer("running_mean", zeros({num_features}));
  running_var_ = register_buffer("running_var", ones({num_features}));
  num_batches_tracked_ = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::i64}));
}

Tensor BatchNorm2d::forward(const Tensor& input) {
  if (is_training()) {
    // Counted on the tensor's own device: a cast, an add and a cast back, no synchronization
    // (exact up to 2^24 batches).
    NoGradGuard no_grad;
    num_batches_tracked_.copy_(num_batches_tracked_.to(DType::f32) + 1.0);
  }
  return batch_norm(input, weight_, bias_, running_mean_, running_var_, is_training(), momentum_, eps_);
}

std::string BatchNorm2d::extra_repr() const {
  return detail::concat(features_, ", eps=", eps_, ", momentum=", momentum_, ", affine=True, track_running_stats=True");
}

}  // namespace ember::nn
