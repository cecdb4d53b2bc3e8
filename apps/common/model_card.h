// What travels with a model in its file's __metadata__, so that a program can rebuild it and feed
// it as its training data was fed: the architecture, the input size, the class names, how
// pictures were prepared and the input scaling. Files without it (exported from PyTorch, or
// written by ember 0.1) get MNIST's conventions, the architecture read from the tensor shapes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/fusion.h"
#include "core/io/serialize.h"
#include "core/tensor/random.h"
#include "data/classification.h"
#include "data/dataset.h"
#include "layers/container.h"

namespace ember::apps {

struct ModelCard {
  std::string kind = "mlp";  // mlp or cnn
  std::int64_t height = 28, width = 28;
  std::vector<std::string> classes;
  std::string dataset = "mnist";
  std::string preprocess = "digit";   // see apps/common/images.h
  data::Normalization normalization;  // the default {0, 1} is pixel/255
  // The widths a new model is built with (new_model) and that its file records: the MLP's hidden
  // layers, or the CNN's dense layer (one) and its two convolutions. A card read from a file
  // leaves them empty: the tensors' shapes say them (build_model).
  std::vector<std::int64_t> hidden, channels;

  std::map<std::string, std::string> to_metadata() const;
};

// The card of a model of `kind` (mlp or cnn) to be trained on `data`: its image size, classes,
// dataset and preparation, and its input scaling (the data's mean and std when `normalized`, else
// pixel/255). The widths are left to the caller.
ModelCard card_for(const data::ClassificationData& data, const std::string& kind, bool normalized);

// A new model of the card's architecture with one output per class, initialized from `init`,
// with `fusion`'s fused paths.
std::shared_ptr<nn::Sequential> new_model(const ModelCard& card, Generator* init, const FusionOptions& fusion);

// The card of a model file; FormatError naming `path` when its metadata or shapes make no sense.
ModelCard read_model_card(const Checkpoint& file, const std::string& path);

// The model the card and the tensors describe, with the tensors loaded.
std::shared_ptr<nn::Sequential> build_model(const ModelCard& card, const Checkpoint& file, const std::string& path);

}  // namespace ember::apps
