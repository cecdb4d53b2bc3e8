// What travels with a model in its file's __metadata__ (safetensors' map of strings), so that a
// program can rebuild it and feed it as its training data was fed. This list is the one place the
// keys are documented; mnist_train --save writes them all (ModelCard::to_metadata), mnist_predict
// reads them (read_model_card), and each is optional:
//
//   key          value                                   when absent
//   model_kind   mlp, cnn or vit                         vit for torchvision's names, else cnn if
//                                                        the first layer is a convolution, else mlp
//   input_shape  HEIGHT,WIDTH of the images              28,28 (an MLP's: the square of its inputs)
//   classes      the class names, a JSON list            "0", "1", ...: one per output
//   dataset      mnist, fashion-mnist or idx             mnist
//   preprocess   how photos are prepared: digit,         digit for 28×28 images, else plain
//                article or plain (apps/common/images.h)
//   input_mean,  the input scaling: the model sees       assumed, with a warning: below
//   input_std    (pixel/255 − input_mean) / input_std
//   hidden,      the widths the model was built with     read from the tensors' shapes (the
//   channels     ("128", "32,64")                        shapes decide in any case)
//   heads        a ViT's attention heads                 4 (the shapes cannot say it)
//   normalize    ember 0.1's: "1" for MNIST's mean and std (0.1307, 0.3081), else pixel/255
//
// Without input_mean and input_std (or ember 0.1's normalize) the scaling is assumed, and
// ModelCard::normalization_assumed says what was assumed, for the program to warn: for
// pytorch/examples' MNIST Net (Note [pytorch/examples' Net names]) the example's Normalize((0.1307,),
// (0.3081,)), since its script trains and tests every such model on inputs scaled so; for any other
// file pixel/255 (ember 0.1's scaling, and mnist_train's for an MLP). From PyTorch:
//   safetensors.torch.save_file(model.state_dict(), "m.safetensors",
//                               metadata={"input_mean": "0.1307", "input_std": "0.3081"})
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/fusion.h"
#include "core/io/serialize.h"
#include "core/tensor/random.h"
#include "data/classification.h"
#include "data/dataset.h"
#include "layers/container.h"
#include "layers/vision_transformer.h"

namespace ember::apps {

struct ModelCard {
  std::string kind = "mlp";  // mlp or cnn
  std::int64_t height = 28, width = 28;
  std::vector<std::string> classes;
  std::string dataset = "mnist";
  std::string preprocess = "digit";   // see apps/common/images.h
  data::Normalization normalization;  // the default {0, 1} is pixel/255
  // Empty when the file records the input scaling (or the card is a new model's); otherwise what
  // read_model_card assumed, in words, for a warning.
  std::string normalization_assumed;
  // The widths a new model is built with (new_model) and that its file records: the MLP's hidden
  // layers, or the CNN's dense layer (one) and its two convolutions. A card read from a file
  // leaves them empty: the tensors' shapes say them (build_model).
  std::vector<std::int64_t> hidden, channels;
  // A ViT's sizes (patch, width, depth, heads, MLP width); a card read from a file has the heads
  // only, the shapes say the rest.
  nn::VitShape vit = {};

  std::map<std::string, std::string> to_metadata() const;
};

// The card of a model of `kind` (mlp, cnn or vit) to be trained on `data`: its image size, classes,
// dataset and preparation, and its input scaling (the data's mean and std when `normalized`, else
// pixel/255). The widths are left to the caller.
ModelCard card_for(const data::ClassificationData& data, const std::string& kind, bool normalized);

// A new model of the card's architecture with one output per class, initialized from `init`,
// with `fusion`'s fused paths.
std::shared_ptr<nn::Module> new_model(const ModelCard& card, Generator* init, const FusionOptions& fusion);

// The card of a model file: an MLP or CNN of ember's, or pytorch/examples' MNIST Net (Note
// [pytorch/examples' Net names]). FormatError naming `path` when its metadata or shapes make no
// sense, or its tensors are none of these (saying what the file holds and what ember reads).
ModelCard read_model_card(const Checkpoint& file, const std::string& path);

// The model the card and the tensors describe, with the tensors loaded (a Net's renamed).
// FormatError naming `path` and the tensor when one holds NaN or an infinity.
std::shared_ptr<nn::Module> build_model(const ModelCard& card, const Checkpoint& file, const std::string& path);

// Loads the model file at `path` into `model`, a model of `card`'s architecture built beforehand
// (mnist_train --init): a Net's tensors renamed to nn::cnn's, then load_state_dict with its strict
// checks; tensors under "optimizer." are ignored. Returns the file's metadata. Errors name `path`:
// FormatError for an unreadable file, NaN or infinite values, a Net file given to an MLP or a file
// of no naming ember reads; ValueError for a missing, unexpected or differently shaped tensor.
std::map<std::string, std::string> load_weights(nn::Module& model, const ModelCard& card, const std::string& path);

}  // namespace ember::apps
