// Which training step trains a model, chosen inside the library by what the model, the optimizer
// and the options say they are and can do: the fused MLP step (train/fused_mlp_step.h) where the
// model is a Sequential of Linear and ReLU layers (Module::kind()), the optimizer's update can be
// captured (Optimizer::capturable()), the loss is the plain cross-entropy, no gradient is clipped
// and the precision runs fused on the model's device; the autograd step (train/step.h) for
// everything else, as a PyTorch loop would run it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/module.h"
#include "optim/optimizer.h"
#include "train/step.h"
#include "train/step_options.h"

namespace ember::train {

// Why the fused step cannot train `model` with `optimizer` and `options` (its loss, clipping,
// precision) on the model's device, naming what can; an empty string when it can.
std::string fused_step_refusal(const nn::Module& model, const optim::Optimizer& optimizer, const StepOptions& options);

// The step make_step built, and for each faster step it did not take, that step's name and why:
// {"fused MLP step", "the model is a VisionTransformer, not a Sequential of Linear and ReLU layers"}.
struct ChosenStep {
  std::unique_ptr<Step> step;
  std::vector<std::pair<std::string, std::string>> not_taken;
};

// The step for `model` and `optimizer`, as options.choice asks (StepChoice::fused where the fused
// step cannot run: ValueError naming why).
ChosenStep make_step(nn::Module& model, optim::Optimizer& optimizer, const StepOptions& options);

}  // namespace ember::train
