// Dropout, as torch.nn.Dropout, with masks that repeat across runs and devices.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "layers/module.h"

namespace ember::nn {

// Zeroes each element with probability p while training and scales the rest by 1/(1−p); the
// identity in eval mode. The masks come from a counter-based stream (the ember::dropout op)
// seeded at construction — from the default generator unless a seed is given — so runs repeat
// and the CPU and a GPU drop the same elements.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, std::optional<std::uint64_t> seed = std::nullopt);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Dropout"; }
  ModuleKind kind() const override { return ModuleKind::dropout; }
  std::string extra_repr() const override;
  // How far into its random stream the layer is: a training checkpoint keeps it, so a resumed
  // run drops the same elements as an uninterrupted one.
  std::uint64_t offset() const { return offset_; }
  void set_offset(std::uint64_t offset) { offset_ = offset; }
  std::uint64_t* random_offset() override { return &offset_; }

 private:
  double p_;
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;  // elements drawn so far
};

}  // namespace ember::nn
