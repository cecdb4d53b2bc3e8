// mnist_train's recipes.
#include "apps/common/recipes.h"

#include "apps/common/program.h"
#include "base/error.h"

namespace ember::apps {

Recipe recipe_for(const std::string& model, const std::string& dataset) {
  if (model == "vit")
    return {.optimizer = "adamw",
            .lr = 0.001,
            .lr_decay = 1.0,
            .batch_size = 64,
            .normalize = true,
            .epochs = dataset == "mnist" ? 60 : 30,  // 10,000 digits against 60,000 clothes: 8k and 23k steps
            .weight_decay = 0.05,
            .schedule = "cosine",
            .warmup_epochs = 3,
            .label_smoothing = 0.1,
            .clip_grad_norm = 1.0,
            .crop_padding = 2,
            .flip = dataset != "mnist"};
  if (model == "cnn") return {.optimizer = "adam", .lr = 0.002, .lr_decay = 0.6, .batch_size = 64, .normalize = true};
  return {.optimizer = "sgd", .lr = 0.5, .lr_decay = 1.0, .batch_size = 128, .normalize = false};
}

std::string describe(const Recipe& r) {
  const char* name = r.optimizer == "sgd" ? "SGD" : r.optimizer == "adam" ? "Adam" : "AdamW";
  using detail::concat;
  std::string text = concat(name, ", lr ", r.lr);
  if (r.schedule == "cosine")
    text += concat(r.warmup_epochs > 0 ? concat(", warm-up ", r.warmup_epochs, " epochs") : "", " then cosine");
  else if (r.lr_decay != 1.0)
    text += concat(" ×", r.lr_decay, " per epoch");
  text += concat(", batch ", r.batch_size, ", ", r.epochs, " epochs, ",
                 r.normalize ? "normalized inputs" : "[0, 1] inputs");
  if (r.weight_decay > 0) text += concat(", weight decay ", r.weight_decay);
  if (r.label_smoothing > 0) text += concat(", label smoothing ", r.label_smoothing);
  if (r.clip_grad_norm > 0) text += concat(", gradients clipped to norm ", r.clip_grad_norm);
  if (r.crop_padding > 0) text += concat(", random crops (padding ", r.crop_padding, ")");
  if (r.flip) text += ", random flips";
  return text;
}

void apply_recipe(Recipe& recipe, std::string& overridden, const std::string& model, const std::string& dataset,
                  const CLI::App& app) {
  auto pick = [&, base = recipe_for(model, dataset)](const char* flag, auto member) {
    if (app.count(flag) == 0) recipe.*member = base.*member;
    if (app.count(flag) > 0) overridden += std::string(" ") + flag;
  };
  pick("--optimizer", &Recipe::optimizer);
  pick("--lr", &Recipe::lr);
  pick("--lr-decay", &Recipe::lr_decay);
  pick("--batch-size", &Recipe::batch_size);
  pick(app.count("--no-normalize") ? "--no-normalize" : "--normalize", &Recipe::normalize);
  pick("--epochs", &Recipe::epochs);
  pick("--weight-decay", &Recipe::weight_decay);
  pick("--schedule", &Recipe::schedule);
  pick("--warmup-epochs", &Recipe::warmup_epochs);
  pick("--label-smoothing", &Recipe::label_smoothing);
  pick("--clip-grad-norm", &Recipe::clip_grad_norm);
  pick("--crop-padding", &Recipe::crop_padding);
  pick(app.count("--no-flip") ? "--no-flip" : "--flip", &Recipe::flip);
}

void check_recipe(const Recipe& r, bool preload) {
  if (r.schedule != "step" && r.schedule != "cosine") throw UsageError("--schedule must be step or cosine");
  if (r.warmup_epochs < 0 || r.warmup_epochs >= r.epochs)
    throw UsageError(detail::concat("--warmup-epochs must be in [0, --epochs), got ", r.warmup_epochs));
  if (!(r.label_smoothing >= 0 && r.label_smoothing < 1)) throw UsageError("--label-smoothing must be in [0, 1)");
  if (!(r.clip_grad_norm >= 0)) throw UsageError("--clip-grad-norm must be 0 (off) or positive");
  if (!(r.weight_decay >= 0)) throw UsageError("--weight-decay must be non-negative");
  if (r.crop_padding < 0) throw UsageError("--crop-padding must be 0 (off) or positive");
  if (preload && (r.crop_padding > 0 || r.flip))
    throw UsageError(
        "--preload gathers the images on the device as they are; augmentation runs in the loader: "
        "add --crop-padding 0 --no-flip, or leave out --preload");
}

void add_recipe_options(CLI::App& app, Recipe& r) {
  app.add_option("--epochs", r.epochs, "epochs to train (recipe: mlp 5, cnn 5, vit 60 on digits, 30 on clothes)")
      ->check(positive);
  app.add_option("--batch-size", r.batch_size, "batch size (recipe: mlp 128, cnn 64, vit 64)")->check(positive);
  app.add_option("--lr", r.lr, "learning rate (recipe: mlp 0.5, cnn 0.002, vit 0.001)");
  app.add_option("--optimizer", r.optimizer, "sgd, adam or adamw (recipe: mlp sgd, cnn adam, vit adamw)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--weight-decay", r.weight_decay, "weight decay (AdamW's decoupled) (recipe: vit 0.05, else 0)")
      ->check(non_negative);
  app.add_option("--lr-decay", r.lr_decay, "the rate's factor after every epoch, StepLR (recipe: mlp 1, cnn 0.6)");
  app.add_flag("--normalize,!--no-normalize", r.normalize, "inputs by mean and std (recipe: cnn and vit on, mlp off)");
  app.add_option("--schedule", r.schedule,
                 "step (lr·--lr-decay per epoch) or cosine (a warm-up, then a cosine to 0, per step) (recipe: vit "
                 "cosine, else step)");
  app.add_option("--warmup-epochs", r.warmup_epochs, "the cosine schedule's linear warm-up (recipe: vit 3)");
  app.add_option("--label-smoothing", r.label_smoothing, "cross-entropy's label smoothing (recipe: vit 0.1)");
  app.add_option("--clip-grad-norm", r.clip_grad_norm, "clip the gradients to this global norm, 0 off (recipe: vit 1)");
  app.add_option("--crop-padding", r.crop_padding,
                 "random crops of the training images after padding by this much, 0 off (recipe: vit 2)");
  app.add_flag("--flip,!--no-flip", r.flip,
               "random horizontal flips of the training images (recipe: vit on clothes, not digits)");
}

std::unique_ptr<optim::LRScheduler> make_schedule(const Recipe& recipe, optim::Optimizer& optimizer,
                                                  std::int64_t steps_per_epoch) {
  if (recipe.schedule == "step") return std::make_unique<optim::StepLR>(optimizer, 1, recipe.lr_decay);
  const std::int64_t warmup = recipe.warmup_epochs * steps_per_epoch, total = recipe.epochs * steps_per_epoch;
  if (warmup == 0) return std::make_unique<optim::CosineAnnealingLR>(optimizer, total);
  std::vector<std::unique_ptr<optim::LRScheduler>> parts;
  parts.push_back(std::make_unique<optim::LinearWarmup>(optimizer, warmup, 0.01));
  parts.push_back(std::make_unique<optim::CosineAnnealingLR>(optimizer, total - warmup));
  return std::make_unique<optim::SequentialLR>(optimizer, std::move(parts), std::vector<std::int64_t>{warmup});
}

}  // namespace ember::apps
