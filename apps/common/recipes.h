// What each of mnist_train's models trains with when no flag says otherwise: the MLP keeps the
// tutorials' settings; the CNN gets the recipe that takes it past 98% on the digits in 5 epochs
// (docs/results/cnn.md). Both opt into every fused path (base/fusion.h) unless
// EMBER_FUSION=0 turns them off.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <string>

namespace ember::apps {

struct Recipe {
  std::string optimizer;
  double lr, lr_decay;
  std::size_t batch_size;
  bool normalize;
};

Recipe recipe_for(const std::string& model);

// "SGD, lr 0.5, batch 128, [0, 1] inputs"
std::string describe(const Recipe& r);

// The recipe's flags override the model's recipe one by one; what they leave out comes from it.
// `overridden` collects the flags given (" --lr --batch-size").
void apply_recipe(Recipe& recipe, std::string& overridden, const std::string& model, const CLI::App& app);

}  // namespace ember::apps
