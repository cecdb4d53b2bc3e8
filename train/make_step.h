// Which training step trains a model, chosen inside the library by what the model and the
// optimizer say they are and can do: the fused MLP step (train/fused_mlp_step.h) where the model
// is a Sequential of Linear and ReLU layers (Module::kind()), the optimizer's update can be
// captured (Optimizer::capturable()) and the precision runs fused on the model's device; the
// autograd step (train/step.h) for everything else, as a PyTorch loop would run it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "layers/module.h"
#include "optim/optimizer.h"
#include "train/fused_mlp_step.h"
#include "train/step.h"

namespace ember::train {

enum class StepChoice { automatic, fused, autograd };

struct StepOptions {
  // automatic: the fused step where it can run and fusion is on (Note [fusion off-switch]),
  // else autograd; fused: the fused step or a ValueError saying why not; autograd: autograd.
  StepChoice choice = StepChoice::automatic;
  std::size_t batch_size = 0;  // the largest batch the fused step is built for
  // Each step's own options; their precision (and micro-batches) must agree.
  FusedMlpStepOptions fused;
  AutogradStepOptions autograd;
};

// Why the fused step cannot train `model` with `optimizer` in `precision` on the model's device,
// naming what can; an empty string when it can.
std::string fused_step_refusal(const nn::Module& model, const optim::Optimizer& optimizer, DType precision);

// Whether make_step builds the fused step for these arguments (throws as make_step would).
bool chooses_fused_step(const nn::Module& model, const optim::Optimizer& optimizer, const StepOptions& options);

// The step for `model` and `optimizer`, as options.choice asks.
std::unique_ptr<Step> make_step(nn::Module& model, optim::Optimizer& optimizer, const StepOptions& options);

}  // namespace ember::train
