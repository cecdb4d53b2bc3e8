// A training step: what the loop (train/loop.h) calls once per batch, whatever does the work.
// Two kinds: AutogradStep — forward, loss, backward and update op by op through autograd, for any
// nn::Module and optim::Optimizer, as a PyTorch training loop is written — and FusedMlpStep
// (train/fused_mlp_step.h), the same step of an MLP written as fused kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"
#include "layers/module.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "train/step_options.h"

namespace ember::dist {
class GradientReducer;
}

namespace ember::train {

class Step {
 public:
  virtual ~Step() = default;
  // Trains on one batch: inputs x and targets y on the model's device.
  virtual void step(const Tensor& x, const Tensor& y) = 0;
  // The last step's mean loss and the Σ of per-sample losses since reset_loss_sum(): f32 scalars
  // in the model's memory, not read by the step (reading synchronizes; read them once per epoch).
  virtual const Tensor& batch_loss() const = 0;
  virtual const Tensor& loss_sum() const = 0;
  virtual void reset_loss_sum() = 0;
  // Sets loss_sum() in place to `sum` (a stopped epoch's, from its checkpoint), so that the resumed
  // epoch's sum is the uninterrupted one's, bit for bit.
  void restore_loss_sum(const Tensor& sum);
  // Host seconds spent in the exchange of gradients between ranks since the last reset (0 for a
  // step that does not reduce across ranks).
  virtual double communication_seconds() const { return 0; }
  virtual void reset_communication_seconds() {}
  // The criterion it trains with (StepOptions::loss): fit evaluates with it too.
  virtual const nn::Loss& loss() const = 0;
  // How the step runs, for logs.
  virtual std::string describe() const = 0;
  // Its kind for a log ("autograd", "fused"), and what it has counted so far (a captured graph's
  // kernel nodes, its replays), name by name.
  virtual std::string kind() const = 0;
  virtual std::vector<std::pair<std::string, std::int64_t>> counters() const { return {}; }
};

class AutogradStep final : public Step {
 public:
  // Takes every field of StepOptions but make_step's and the fused step's.
  AutogradStep(nn::Module& model, optim::Optimizer& optimizer, StepOptions options = {});
  ~AutogradStep() override;
  AutogradStep(const AutogradStep&) = delete;
  AutogradStep& operator=(const AutogradStep&) = delete;

  void step(const Tensor& x, const Tensor& y) override;
  const Tensor& batch_loss() const override { return batch_loss_; }
  const Tensor& loss_sum() const override { return loss_sum_; }
  void reset_loss_sum() override;
  double communication_seconds() const override;
  void reset_communication_seconds() override;
  const nn::Loss& loss() const override { return options_.loss; }
  std::string describe() const override;
  std::string kind() const override { return "autograd"; }
  // Skipped steps of an f16 step's loss scaler, for logs.
  std::vector<std::pair<std::string, std::int64_t>> counters() const override;
  // The loss scaler of an f16 step (null otherwise).
  const optim::GradScaler* grad_scaler() const { return scaler_.get(); }

 private:
  nn::Module& model_;
  optim::Optimizer& optimizer_;
  StepOptions options_;
  std::unique_ptr<dist::GradientReducer> reducer_;
  std::unique_ptr<optim::GradScaler> scaler_;
  Tensor batch_loss_, loss_sum_;
};

}  // namespace ember::train
