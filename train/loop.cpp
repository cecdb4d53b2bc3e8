// The training loop.
#include "train/loop.h"

#include <chrono>
#include <cmath>

#include "base/fault_point.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "core/tensor/device.h"
#include "distributed/dist.h"

namespace ember::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string where(std::int64_t step, const Device& device) {
  if (step >= 0) return detail::concat(", step ", step);
  return " (on " + device.str() + " the loss is checked once per epoch, so the step is not known)";
}

}  // namespace

NonFiniteLoss::NonFiniteLoss(int epoch_, std::int64_t step_, const Device& device)
    : Error(detail::concat("non-finite training loss in epoch ", epoch_, where(step_, device))),
      epoch(epoch_),
      step(step_) {}

Evaluation evaluate(nn::Module& model, data::BatchSource& batches, std::size_t count, bool across_ranks,
                    const nn::Loss& loss) {
  NoGradGuard no_grad;
  model.eval();
  batches.start_epoch(0);
  const Device device = batches.device();
  Tensor loss_sum = zeros({}, {.device = device}), correct = zeros({}, {.device = device});
  while (auto batch = batches.next()) {
    const Tensor logits = model(batch->x);
    const double rows = static_cast<double>(batch->x.size(0));
    add_(loss_sum, loss(logits, batch->y) * rows);
    add_(correct, count_equal(argmax(logits), batch->y).to(DType::f32));
  }
  if (across_ranks) {
    dist::all_reduce(loss_sum);
    dist::all_reduce(correct);
  }
  const auto n = static_cast<double>(count);
  return {loss_sum.item<double>() / n, correct.item<double>() / n};
}

EpochResult train_epoch(nn::Module& model, Step& step, data::BatchSource& batches, int epoch,
                        const EpochOptions& options) {
  const auto t0 = Clock::now();
  const double gemm_s0 = cpu_gemm_seconds();
  const Device device = batches.device();
  model.train();
  batches.start_epoch(epoch);
  step.reset_loss_sum();
  if (options.loss_sum_so_far.defined()) step.restore_loss_sum(options.loss_sum_so_far);
  step.reset_communication_seconds();
  EpochResult out;
  std::int64_t steps = 0, rows = 0;
  for (; steps < options.first_step; ++steps) {  // done before the stop this epoch resumes from
    const auto batch = batches.next();
    if (!batch)
      throw ValueError(detail::concat("resuming epoch ", epoch, " at step ", options.first_step,
                                      ": the epoch has only ", steps, " steps"));
    rows += batch->x.size(0);
  }
  while (auto batch = batches.next()) {
    try {
      fault_point("forward");  // Note [fault points]
      step.step(batch->x, batch->y);
    } catch (const NonFiniteError&) {  // a step that checks its own loss (the fused step on the CPU)
      throw NonFiniteLoss(epoch, steps, device);
    }
    // On the CPU reading the loss costs nothing, so a non-finite one is caught at its step; on a
    // GPU the epoch's sum is checked once instead of synchronizing every step.
    if (device.is_cpu() && !std::isfinite(step.batch_loss().item<double>())) throw NonFiniteLoss(epoch, steps, device);
    if (options.record_step_losses) out.step_losses.push_back(step.batch_loss().item<double>());
    if (options.step_schedule) options.step_schedule->step();
    rows += batch->x.size(0);
    ++steps;
    if (options.on_step) options.on_step(static_cast<std::size_t>(steps), options.steps);
    if (options.stop_requested && options.stop_requested()) {
      out.stopped = static_cast<std::size_t>(steps) != options.steps || batches.next().has_value();
      break;
    }
  }
  out.steps = steps;
  // Every rank trains on an equal share (data::Shard pads the last), so the samples are this
  // rank's times the ranks.
  const int ranks = options.across_ranks ? dist::world_size() : 1;
  out.samples = static_cast<double>(rows) * ranks;
  Tensor loss_sum = step.loss_sum().clone();
  try {
    if (options.across_ranks) dist::all_reduce(loss_sum);
    out.loss = loss_sum.item<double>() / out.samples;
  } catch (const NonFiniteError&) {  // raised on the device, read here once per epoch
    throw NonFiniteLoss(epoch, -1, device);
  }
  if (!std::isfinite(out.loss)) throw NonFiniteLoss(epoch, -1, device);
  if (options.across_ranks && !out.step_losses.empty()) {  // each step's loss over all ranks: their mean
    Tensor losses = from_vector(out.step_losses, {static_cast<std::int64_t>(out.step_losses.size())});
    dist::all_reduce(losses);
    out.step_losses = mul_(losses, 1.0 / ranks).to_vector<double>();
  }
  out.communication_seconds = step.communication_seconds();
  out.gemm_seconds = cpu_gemm_seconds() - gemm_s0;
  out.loader = batches.epoch_stats();
  out.seconds = seconds_since(t0);
  return out;
}

FitResult fit(nn::Module& model, Step& step, data::BatchSource& train, data::BatchSource& validation,
              std::size_t validation_count, const FitOptions& options) {
  for (int epoch = options.start_epoch; epoch < options.epochs; ++epoch) {
    const auto t0 = Clock::now();
    EpochOptions epoch_options = options.epoch;
    if (epoch == options.start_epoch) {
      epoch_options.first_step = options.start_step;
      epoch_options.loss_sum_so_far = options.loss_sum_so_far;
    }
    EpochReport report{
        .epoch = epoch, .train = train_epoch(model, step, train, epoch, epoch_options), .validation = {}};
    if (report.train.stopped) return {true, epoch, report.train.steps};
    report.validation = evaluate(model, validation, validation_count, options.epoch.across_ranks, step.loss());
    report.seconds = seconds_since(t0);
    if (options.on_epoch) options.on_epoch(report);
    if (options.schedule) options.schedule->step();
    const auto& stop = options.epoch.stop_requested;
    if (epoch + 1 < options.epochs && stop && stop()) return {true, epoch + 1, 0};
  }
  return {false, options.epochs, 0};
}

}  // namespace ember::train
