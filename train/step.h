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
  // How the step runs, for logs.
  virtual std::string describe() const = 0;
  // Its kind for a log ("autograd", "fused"), and what it has counted so far (a captured graph's
  // kernel nodes, its replays), name by name.
  virtual std::string kind() const = 0;
  virtual std::vector<std::pair<std::string, std::int64_t>> counters() const { return {}; }
};

// The loss of a batch: model output and targets → a scalar mean.
using LossFunction = std::function<Tensor(const Tensor& output, const Tensor& target)>;

struct AutogradStepOptions {
  // Gradient accumulation: each batch split into this many micro-batches, rows m, m + K, ... (the
  // rows rank m of K ranks would take), their gradients summed and divided by K — one process
  // reproducing K ranks bit for bit. Must divide every batch's size.
  std::size_t micro_batches = 1;
  // Data-parallel (dist::): average the gradients over the ranks in buckets during backward.
  bool reduce_across_ranks = false;
  // Mixed precision: bf16 or f16 runs the forward pass and the loss under autocast to that dtype
  // on the model's device (core/ops/autocast.h); f32 leaves autocast off. The parameters and the
  // optimizer stay f32 either way. f16 also scales the loss (optim::GradScaler with these
  // options): its gradients would otherwise underflow below 2^-24; bf16 has f32's range and
  // needs no scaler.
  DType precision = DType::f32;
  optim::GradScalerOptions grad_scaler = {};
  // > 0: the gradients clipped to this global 2-norm before the update (optim::clip_grad_norm),
  // after the ranks' average and after an f16 scaler's unscaling, as a PyTorch loop places it.
  double clip_grad_norm = 0.0;
  // The default loss's label smoothing (cross_entropy with ε); ignored with a loss of one's own.
  double label_smoothing = 0.0;
};

class AutogradStep final : public Step {
 public:
  // `loss` defaults to cross_entropy (logits [B, C], class indices [B]).
  AutogradStep(nn::Module& model, optim::Optimizer& optimizer, LossFunction loss = {},
               AutogradStepOptions options = {});
  ~AutogradStep() override;
  AutogradStep(const AutogradStep&) = delete;
  AutogradStep& operator=(const AutogradStep&) = delete;

  void step(const Tensor& x, const Tensor& y) override;
  const Tensor& batch_loss() const override { return batch_loss_; }
  const Tensor& loss_sum() const override { return loss_sum_; }
  void reset_loss_sum() override;
  double communication_seconds() const override;
  void reset_communication_seconds() override;
  std::string describe() const override;
  std::string kind() const override { return "autograd"; }
  // Skipped steps of an f16 step's loss scaler, for logs.
  std::vector<std::pair<std::string, std::int64_t>> counters() const override;
  // The loss scaler of an f16 step (null otherwise).
  const optim::GradScaler* grad_scaler() const { return scaler_.get(); }

 private:
  nn::Module& model_;
  optim::Optimizer& optimizer_;
  LossFunction loss_;
  AutogradStepOptions options_;
  std::unique_ptr<dist::GradientReducer> reducer_;
  std::unique_ptr<optim::GradScaler> scaler_;
  Tensor batch_loss_, loss_sum_;
};

}  // namespace ember::train
