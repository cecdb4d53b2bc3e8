// The training loop, for any nn::Module and any Step (train/step.h): one epoch over a BatchSource,
// evaluation, and fit — epochs with a learning-rate schedule and a hook after each, where a
// program logs, checkpoints (train/checkpoint.h) and plots. As pytorch/examples' mnist/main.py
// splits train / test / main, so do train_epoch / evaluate / fit.
//
//   train::AutogradStep step(*model, sgd);
//   train::fit(*model, step, train_batches, val_batches, val_images, {.epochs = 5});
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "base/error.h"
#include "data/loader.h"
#include "layers/loss.h"
#include "layers/module.h"
#include "optim/scheduler.h"
#include "train/step.h"

namespace ember::train {

// A loss that became NaN or infinite while training: the epoch, and the step where the device lets
// it be known at once (on the CPU; a GPU's is found when the epoch's sum is read: step -1).
class NonFiniteLoss : public Error {
 public:
  NonFiniteLoss(int epoch, std::int64_t step, const Device& device);
  int epoch;
  std::int64_t step;
};

struct Evaluation {
  double loss = 0, accuracy = 0;  // the mean loss and the fraction classified right
};

// Mean loss and accuracy of a classifier over `count` samples from `batches` (in eval mode, no
// gradients): each batch's mean `loss` weighted by its rows (fit passes the step's, Step::loss()).
// The sums stay on the device and are read once; with `across_ranks` they are summed over the
// ranks of dist:: first (each rank evaluated its share).
Evaluation evaluate(nn::Module& model, data::BatchSource& batches, std::size_t count, bool across_ranks = false,
                    const nn::Loss& loss = {});

struct EpochOptions {
  bool across_ranks = false;        // data-parallel: the loss summed over the ranks of dist::
  bool record_step_losses = false;  // keep each step's mean loss (reading it synchronizes)
  std::size_t steps = 0;            // steps per epoch, for on_step (0: unknown)
  // A resumed epoch: its first `first_step` batches were trained before the stop and are drawn
  // and skipped (the data order and the samples counted as an uninterrupted epoch's), and the
  // loss sum starts from `loss_sum_so_far` (Step::loss_sum() at the stop; undefined: zero).
  std::int64_t first_step = 0;
  Tensor loss_sum_so_far = Tensor();
  std::function<void(std::size_t done, std::size_t steps)> on_step;  // after every step: progress
  optim::LRScheduler* step_schedule = nullptr;                       // stepped after every step (a per-step schedule)
  // After every step: true ends the epoch there (a stop asked for by a signal; in a data-parallel
  // run every rank must answer alike, e.g. dist::all_agree).
  std::function<bool()> stop_requested = {};
};

struct EpochResult {
  double loss = 0;                   // mean training loss over the epoch's samples (over all ranks)
  double samples = 0;                // samples trained on (over all ranks; equal shares: data::Shard)
  double seconds = 0;                // wall seconds of the pass
  double gemm_seconds = 0;           // of which in CPU GEMMs on this thread (cpu_gemm_seconds)
  double communication_seconds = 0;  // host seconds exchanging gradients (Step::communication_seconds)
  data::LoaderStats loader;          // how long the training waited for its input
  std::vector<double> step_losses;   // with record_step_losses (the mean over ranks)
  std::int64_t steps = 0;            // steps done, skipped ones included
  bool stopped = false;              // stop_requested ended it early: loss and samples are partial
};

// One pass over `batches`: the model in training mode, step.step() on every batch. Throws
// NonFiniteLoss for a non-finite loss.
EpochResult train_epoch(nn::Module& model, Step& step, data::BatchSource& batches, int epoch,
                        const EpochOptions& options = {});

struct EpochReport {
  int epoch = 0;
  EpochResult train;
  Evaluation validation;
  double seconds = 0;  // training and validation
};

struct FitOptions {
  int epochs = 1;
  int start_epoch = 0;                                    // a resumed run's next epoch (train/checkpoint.h)
  std::int64_t start_step = 0;                            // and the steps of it already done
  Tensor loss_sum_so_far = Tensor();                      // with start_step: Step::loss_sum() then
  optim::LRScheduler* schedule = nullptr;                 // stepped after every epoch
  EpochOptions epoch = {};                                // how each epoch runs
  std::function<void(const EpochReport&)> on_epoch = {};  // after each epoch: log, checkpoint, plot
};

struct FitResult {
  bool stopped = false;   // epoch.stop_requested ended it before `epochs`
  int epoch = 0;          // where it ended: epochs done,
  std::int64_t step = 0;  // and steps done of the next (0 when it stopped at an epoch's end)
};

// Epochs start_epoch .. epochs-1: train_epoch, evaluate on `validation` (`validation_count`
// samples), on_epoch, the schedule's step. A stop request ends it after the step it arrived in
// (an epoch cut short is neither evaluated nor reported), or after on_epoch at an epoch's end.
FitResult fit(nn::Module& model, Step& step, data::BatchSource& train, data::BatchSource& validation,
              std::size_t validation_count, const FitOptions& options);

}  // namespace ember::train
