// mnist_train's recipes.
#include "apps/common/recipes.h"

#include "base/error.h"

namespace ember::apps {

Recipe recipe_for(const std::string& model) {
  return model == "cnn" ? Recipe{"adam", 0.002, 0.6, 64, true} : Recipe{"sgd", 0.5, 1.0, 128, false};
}

std::string describe(const Recipe& r) {
  const char* name = r.optimizer == "sgd" ? "SGD" : r.optimizer == "adam" ? "Adam" : "AdamW";
  return detail::concat(name, ", lr ", r.lr, r.lr_decay != 1.0 ? detail::concat(" ×", r.lr_decay, " per epoch") : "",
                        ", batch ", r.batch_size, ", ", r.normalize ? "normalized inputs" : "[0, 1] inputs");
}

void apply_recipe(Recipe& recipe, std::string& overridden, const std::string& model, const CLI::App& app) {
  auto pick = [&, base = recipe_for(model)](const char* flag, auto member) {
    if (app.count(flag) == 0) recipe.*member = base.*member;
    if (app.count(flag) > 0) overridden += std::string(" ") + flag;
  };
  pick("--optimizer", &Recipe::optimizer);
  pick("--lr", &Recipe::lr);
  pick("--lr-decay", &Recipe::lr_decay);
  pick("--batch-size", &Recipe::batch_size);
  pick(app.count("--no-normalize") ? "--no-normalize" : "--normalize", &Recipe::normalize);
}

}  // namespace ember::apps
