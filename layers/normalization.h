// The normalization layers, as torch.nn's: LayerNorm and BatchNorm2d, under PyTorch's parameter and
// buffer names so checkpoints interchange.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layers/module.h"

namespace ember::nn {

// Normalizes over the last dims (normalized_shape): (x − mean)/√(var + eps), the variance biased,
// then weight·x̂ + bias when elementwise_affine (weight ones, bias zeros at first), as
// torch.nn.LayerNorm.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<std::int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

 private:
  std::vector<std::int64_t> shape_;
  double eps_;
  Tensor weight_, bias_;
};

// Per-channel normalization with learned scale and shift. Buffers running_mean, running_var and
// the i64 num_batches_tracked, under PyTorch's names.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;

 private:
  std::int64_t features_;
  double eps_, momentum_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

}  // namespace ember::nn
