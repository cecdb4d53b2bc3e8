// The choice between the fused and the autograd step (see make_step.h).
#include "train/make_step.h"

#include "base/error.h"
#include "base/fusion.h"
#include "layers/container.h"
#include "train/fused_mlp_step.h"

namespace ember::train {

std::string fused_step_refusal(const nn::Module& model, const optim::Optimizer& optimizer, const StepOptions& options) {
  if (model.kind() != nn::ModuleKind::sequential)
    return "the model is a " + model.type_name() + ", not a Sequential of Linear and ReLU layers";
  if (std::string why = fused_mlp_step_unsupported(static_cast<const nn::Sequential&>(model)); !why.empty()) return why;
  if (!optimizer.capturable())
    return optimizer.type_name() +
           " does not say that its update can be captured (Optimizer::capturable()); the autograd step runs it";
  if (!options.loss.is_plain_cross_entropy())
    return "it computes the plain cross-entropy, not " + options.loss.describe() + "; the autograd step computes it";
  if (options.autograd.clip_grad_norm > 0) return "gradient clipping runs on the autograd step";
  const std::vector<Tensor> params = model.parameters();
  return fused_mlp_step_unsupported(options.precision, params.front().device());
}

ChosenStep make_step(nn::Module& model, optim::Optimizer& optimizer, const StepOptions& options) {
  ChosenStep chosen;
  if (options.choice != StepChoice::autograd) {
    std::string refusal = fused_step_refusal(model, optimizer, options);
    if (options.choice == StepChoice::fused)
      EMBER_CHECK(refusal.empty(), ValueError, "the fused step cannot run here: ", refusal);
    if (refusal.empty() && !fusion_enabled()) refusal = "fusion is off (EMBER_FUSION=0, Note [fusion off-switch])";
    if (refusal.empty()) {
      chosen.step =
          std::make_unique<FusedMlpStep>(static_cast<nn::Sequential&>(model), optimizer, options.batch_size, options);
      return chosen;
    }
    chosen.not_taken.emplace_back("fused MLP step", refusal);
  } else {
    chosen.not_taken.emplace_back("fused MLP step", "the autograd step was asked for");
  }
  chosen.step = std::make_unique<AutogradStep>(model, optimizer, options);
  return chosen;
}

}  // namespace ember::train
