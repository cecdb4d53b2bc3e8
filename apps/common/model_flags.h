// The flags that pick and size mnist_train's model — --model, --hidden, --channels and the ViT's
// --patch, --width, --depth, --heads, --mlp-dim — parsed, checked and turned into a model card.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "apps/common/model_card.h"
#include "data/classification.h"
#include "layers/vision_transformer.h"

namespace ember::apps {

struct ModelFlags {
  std::string model = "mlp", hidden, channels = "32,64";
  nn::VitShape vit{.patch = 4, .hidden = 64, .depth = 4, .heads = 4, .mlp = 128};
  std::vector<std::int64_t> hidden_sizes, channel_sizes;  // --hidden and --channels, parsed by check
  bool is_cnn() const { return model == "cnn"; }
  bool is_vit() const { return model == "vit"; }
  // The sizes in one line, for settings and titles: "32", "128 32,64", "patch 4, width 64, ...".
  std::string sizes() const;
};

void add_model_options(CLI::App& app, ModelFlags& flags);
// Parses --hidden and --channels (defaults: the MLP's 32, the CNN's dense 128) and checks every
// size; UsageError naming the flag otherwise.
void check_model_flags(ModelFlags& flags);
// The card of the flags' model for `data`: its sizes, image size and input scaling (the data's
// mean and std when `normalized`). UsageError when the ViT's patch does not divide the images.
ModelCard card_for(const ModelFlags& flags, const data::ClassificationData& data, bool normalized);

}  // namespace ember::apps
