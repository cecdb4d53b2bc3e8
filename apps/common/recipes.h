// What each of mnist_train's models trains with when no flag says otherwise: the MLP keeps the
// tutorials' settings; the CNN gets the recipe that takes it past 98% on the digits in 5 epochs
// (docs/results/cnn.md); the ViT a transformer's recipe (AdamW with weight decay, a linear
// warm-up then a cosine per step, label smoothing, gradient clipping, random crops, and flips
// for clothes but not digits: docs/results/vit.md). All opt into every fused path
// (base/fusion.h) unless EMBER_FUSION=0 turns them off.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "optim/scheduler.h"

namespace ember::apps {

struct Recipe {
  std::string optimizer;
  double lr, lr_decay;  // lr_decay: the per-epoch factor of the "step" schedule
  std::size_t batch_size;
  bool normalize;
  int epochs = 5;
  double weight_decay = 0.0;
  // "step": lr·lr_decay^epoch, per epoch; "cosine": a linear warm-up from lr/100 over
  // warmup_epochs, then a cosine to 0 over the rest, both per step (SequentialLR).
  std::string schedule = "step";
  int warmup_epochs = 0;
  double label_smoothing = 0.0, clip_grad_norm = 0.0;  // 0: off
  int crop_padding = 0;                                // random crops: 0 off
  bool flip = false;                                   // random horizontal flips
};

// The recipe of `model` (mlp, cnn or vit) on `dataset` (the ViT's flips clothes, not digits).
Recipe recipe_for(const std::string& model, const std::string& dataset = "mnist");
// "SGD, lr 0.5, batch 128, [0, 1] inputs"
std::string describe(const Recipe& r);
// The recipe's flags override the model's recipe one by one; what they leave out comes from it.
// `overridden` collects the flags given (" --lr --batch-size").
void apply_recipe(Recipe& recipe, std::string& overridden, const std::string& model, const std::string& dataset,
                  const CLI::App& app);
// UsageError naming the flag for a recipe that makes no sense (or augments preloaded images).
void check_recipe(const Recipe& recipe, bool preload);
// The recipe's flags: its optimizer, rate, schedule, batch, epochs, loss, clipping and augmentation.
void add_recipe_options(CLI::App& app, Recipe& recipe);
// The recipe's schedule: StepLR per epoch ("step"), or per step a linear warm-up from lr/100 then a
// cosine to 0 at the last step ("cosine": PyTorch's SequentialLR of LinearLR and
// CosineAnnealingLR); the caller steps it per epoch or per step accordingly.
std::unique_ptr<optim::LRScheduler> make_schedule(const Recipe& recipe, optim::Optimizer& optimizer,
                                                  std::int64_t steps_per_epoch);

}  // namespace ember::apps
