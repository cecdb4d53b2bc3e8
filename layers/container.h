// Sequential, as torch.nn.Sequential, and where a model's fused paths are chosen (FusionOptions).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "base/fusion.h"
#include "layers/module.h"

namespace ember::nn {

// Runs its children in order; they are named "0", "1", ... as in PyTorch, or as appended.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);  // Sequential{a, b, c}
  // std::make_shared<nn::Sequential>(a, b, c), as the initializer list cannot pass through
  // make_shared; each argument a shared_ptr to a Module.
  template <class... Modules>
  requires(sizeof...(Modules) > 0 &&
           (std::is_base_of_v<Module, Modules> && ...)) explicit Sequential(std::shared_ptr<Modules>... modules)
      : Sequential({std::static_pointer_cast<Module>(std::move(modules))...}) {}
  Sequential& append(std::shared_ptr<Module> module);  // named by its position
  // Named as given, as a Sequential built from an OrderedDict is in PyTorch ("head", "encoder_layer_0").
  Sequential& append(const std::string& name, std::shared_ptr<Module> module);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Sequential"; }
  ModuleKind kind() const override { return ModuleKind::sequential; }
  std::size_t size() const { return named_children().size(); }

  // From now on, runs the layer groups `options` asks for as one fused op each (core/ops/fused.h):
  // Linear→ReLU as fused::linear_relu, Conv2d→ReLU as fused::conv2d_relu, Conv2d→ReLU→MaxPool2d
  // as fused::conv2d_relu_max_pool2d. Only plain nn::Linear/nn::Conv2d/nn::ReLU/nn::MaxPool2d
  // are fused — a subclass's own forward always runs — and the children and their names stay as
  // they are. Returns the number of groups fused: none under the global off-switch (Note [fusion
  // off-switch]). Layers appended later run unfused until fuse is called again; unfuse() undoes it.
  std::size_t fuse(const FusionOptions& options);
  void unfuse();
  // Whether child `index` is a Linear or Conv2d that runs fused with the layers after it, and
  // with how many of them (1: the ReLU; 2: the ReLU and a MaxPool2d).
  bool fused_at(std::size_t index) const { return fused_with(index) > 0; }
  std::size_t fused_with(std::size_t index) const { return index < fused_.size() ? fused_[index] : 0; }

 private:
  std::vector<std::uint8_t> fused_;
};

}  // namespace ember::nn
