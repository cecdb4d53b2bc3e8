// The autograd training step.
#include "train/step.h"

#include "core/cuda/profile.h"
#include "core/ops/autocast.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "distributed/reducer.h"
#include "optim/clip_grad.h"

namespace ember::train {
namespace {

// Rows m, m + k, m + 2k, ... of a batch: micro-batch m of k, the rows rank m of k ranks takes.
Tensor strided_rows(const Tensor& t, std::size_t m, std::size_t k) {
  Shape split = t.shape(), out = t.shape();
  out[0] = split[0] / static_cast<std::int64_t>(k);
  split[0] = out[0];
  split.insert(split.begin() + 1, static_cast<std::int64_t>(k));
  return slice(t.reshape(split), 1, static_cast<std::int64_t>(m), 1).reshape(out);
}

Device device_of(nn::Module& model) {
  const auto parameters = model.parameters();
  return parameters.empty() ? Device::cpu() : parameters.front().device();
}

}  // namespace

AutogradStep::AutogradStep(nn::Module& model, optim::Optimizer& optimizer, StepOptions options)
    : model_(model), optimizer_(optimizer), options_(std::move(options)) {
  EMBER_CHECK(options_.micro_batches >= 1, ValueError, "AutogradStep: micro_batches must be at least 1");
  EMBER_CHECK(options_.precision == DType::f32 || is_half(options_.precision), ValueError,
              "AutogradStep: precision must be f32, bf16 or f16, got ", options_.precision);
  options_.loss.check();
  if (options_.precision == DType::f16) scaler_ = std::make_unique<optim::GradScaler>(options_.autograd.grad_scaler);
  if (options_.reduce_across_ranks) reducer_ = std::make_unique<dist::GradientReducer>(model.parameters());
  reset_loss_sum();
  batch_loss_ = zeros({}, {.device = loss_sum_.device()});
}

AutogradStep::~AutogradStep() = default;

void Step::restore_loss_sum(const Tensor& sum) {
  NoGradGuard no_grad;
  Tensor target = loss_sum();  // shares the step's storage
  target.copy_(sum.to(target.device()));
}

void AutogradStep::reset_loss_sum() { loss_sum_ = zeros({}, {.device = device_of(model_)}); }

// Forward, backward, the gradients averaged over the ranks (in buckets during backward), the
// update. With K micro-batches each micro-batch's backward adds into .grad and the sum is divided
// by K.
void AutogradStep::step(const Tensor& x_batch, const Tensor& y_batch) {
  const std::size_t k = options_.micro_batches;
  EMBER_CHECK(x_batch.size(0) % static_cast<std::int64_t>(k) == 0, ValueError, "AutogradStep: a batch of ",
              x_batch.size(0), " rows does not split into ", k, " equal micro-batches");
  optimizer_.zero_grad();
  Tensor step_loss = zeros({}, {.device = x_batch.device()});
  for (std::size_t m = 0; m < k; ++m) {
    const Tensor x = k > 1 ? strided_rows(x_batch, m, k) : x_batch;
    const Tensor y = k > 1 ? strided_rows(y_batch, m, k) : y_batch;
    if (reducer_) reducer_->set_enabled(m + 1 == k);  // one reduction, of the sum, at the last
    Tensor loss;
    {
      ProfileRange range("forward");
      const bool mixed = options_.precision != DType::f32;
      const AutocastScope autocast(x.device(), mixed ? options_.precision : DType::bf16, mixed);
      loss = options_.loss(model_(x), y).to(DType::f32);
    }
    {
      ProfileRange range("backward");
      (scaler_ ? scaler_->scale(loss) : loss).backward();
    }
    NoGradGuard no_grad;
    add_(loss_sum_, loss.detach() * static_cast<double>(x.size(0)));
    add_(step_loss, loss.detach());
  }
  if (reducer_) {
    ProfileRange range("gradient reduction");
    reducer_->finish();
  }
  if (k > 1) {
    NoGradGuard no_grad;
    for (const Tensor& p : model_.parameters()) {
      Tensor g = p.grad();
      if (g.defined()) mul_(g, 1.0 / static_cast<double>(k));
    }
    mul_(step_loss, 1.0 / static_cast<double>(k));
  }
  if (options_.autograd.clip_grad_norm > 0) {
    if (scaler_) scaler_->unscale_(optimizer_);
    optim::clip_grad_norm(model_.parameters(), options_.autograd.clip_grad_norm);
  }
  {
    ProfileRange range("optimizer");
    if (scaler_) {  // unscales, steps unless a gradient overflowed, adapts the scale
      scaler_->step(optimizer_);
      scaler_->update();
    } else {
      optimizer_.step();
    }
  }
  batch_loss_ = step_loss;
}

double AutogradStep::communication_seconds() const { return reducer_ ? reducer_->wait_seconds() : 0.0; }

void AutogradStep::reset_communication_seconds() {
  if (reducer_) reducer_->reset_wait_seconds();
}

std::string AutogradStep::describe() const {
  std::string text = "autograd, op by op";
  if (options_.micro_batches > 1) text += detail::concat(", ", options_.micro_batches, " micro-batches");
  if (reducer_) text += ", gradients averaged in buckets during backward";
  if (options_.precision != DType::f32) text += detail::concat(", ", options_.precision, " autocast");
  if (!options_.loss.is_plain_cross_entropy()) text += ", " + options_.loss.describe();
  if (options_.autograd.clip_grad_norm > 0)
    text += detail::concat(", gradients clipped to norm ", options_.autograd.clip_grad_norm);
  if (options_.precision == DType::bf16 && !model_.device().is_cuda())
    text += ext::cpu_bf16_kernels() ? " (AVX512-BF16 kernels)" : " (products in f32: no AVX512-BF16)";
  if (scaler_) text += detail::concat(" with loss scaling (from ", scaler_->get_scale(), ")");
  return text;
}

std::vector<std::pair<std::string, std::int64_t>> AutogradStep::counters() const {
  if (!scaler_) return {};
  return {{"skipped_steps", scaler_->skipped_steps()}};
}

}  // namespace ember::train
