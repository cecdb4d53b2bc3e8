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

#include "core/io/serialize.h"
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

  std::map<std::string, std::string> to_metadata() const;
};

// The card of a model file; FormatError naming `path` when its metadata or shapes make no sense.
ModelCard read_model_card(const Checkpoint& file, const std::string& path);

// The model the card and the tensors describe, with the tensors loaded.
std::shared_ptr<nn::Sequential> build_model(const ModelCard& card, const Checkpoint& file, const std::string& path);

}  // namespace ember::apps
