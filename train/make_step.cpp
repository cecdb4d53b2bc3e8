// The choice between the fused and the autograd step (see make_step.h).
#include "train/make_step.h"

#include "base/error.h"
#include "base/fusion.h"
#include "layers/container.h"

namespace ember::train {

std::string fused_step_refusal(const nn::Module& model, const optim::Optimizer& optimizer, DType precision) {
  if (model.kind() != nn::ModuleKind::sequential)
    return "the model is a " + model.type_name() + ", not a Sequential of Linear and ReLU layers";
  if (std::string why = fused_mlp_step_unsupported(static_cast<const nn::Sequential&>(model)); !why.empty()) return why;
  if (!optimizer.capturable())
    return optimizer.type_name() +
           " does not say that its update can be captured (Optimizer::capturable()); the autograd step runs it";
  const std::vector<Tensor> params = model.parameters();
  return fused_mlp_step_unsupported(precision, params.front().device());
}

bool chooses_fused_step(const nn::Module& model, const optim::Optimizer& optimizer, const StepOptions& options) {
  EMBER_CHECK(options.fused.precision == options.autograd.precision &&
                  options.fused.micro_batches == options.autograd.micro_batches,
              ValueError, "make_step: the fused and autograd options disagree on precision or micro-batches");
  if (options.choice == StepChoice::autograd) return false;
  const bool autograd_only = options.autograd.clip_grad_norm > 0 || options.autograd.label_smoothing > 0;
  const std::string refusal = autograd_only ? "gradient clipping and label smoothing run on the autograd step"
                                            : fused_step_refusal(model, optimizer, options.fused.precision);
  if (options.choice == StepChoice::fused) {
    EMBER_CHECK(refusal.empty(), ValueError, "the fused step cannot run here: ", refusal);
    return true;
  }
  return refusal.empty() && fusion_enabled();
}

std::unique_ptr<Step> make_step(nn::Module& model, optim::Optimizer& optimizer, const StepOptions& options) {
  if (chooses_fused_step(model, optimizer, options))
    return std::make_unique<FusedMlpStep>(static_cast<nn::Sequential&>(model), optimizer, options.batch_size,
                                          options.fused);
  return std::make_unique<AutogradStep>(model, optimizer, nullptr, options.autograd);
}

}  // namespace ember::train
