// Route 1: a layer written with ember's ops. Autograd, both devices and checkpoints come with it.
// (ember ships nn::LayerNorm too; this is how one is written.)
#pragma once

#include <ember/ember.h>

namespace example {

// (x − mean)/√(var + eps)·weight + bias over the last dim, the variance biased, as PyTorch's.
inline ember::Tensor layer_norm(const ember::Tensor& x, const ember::Tensor& weight, const ember::Tensor& bias,
                                double eps = 1e-5) {
  using namespace ember;
  const Tensor centered = x - mean(x, -1, true);
  return centered * rsqrt(var(x, -1, 0, true) + eps) * weight + bias;
}

// Parameter names `weight` and `bias`, as torch.nn.LayerNorm's: checkpoints load either way.
class LayerNorm : public ember::nn::Module {
 public:
  explicit LayerNorm(std::int64_t features) : features_(features) {
    weight_ = register_parameter("weight", ember::ones({features}));
    bias_ = register_parameter("bias", ember::zeros({features}));
  }
  ember::Tensor forward(const ember::Tensor& x) override {
    check_input_shape(x.dim() >= 1 && x.size(-1) == features_, x,
                      "an input whose last dim is " + std::to_string(features_));
    return layer_norm(x, weight_, bias_);
  }
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override { return "(" + std::to_string(features_) + ",)"; }

 private:
  std::int64_t features_;
  ember::Tensor weight_, bias_;
};

}  // namespace example
