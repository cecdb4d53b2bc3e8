// The names a model file gives ember's models' tensors, and the one other naming ember reads.
//
// Note [pytorch/examples' Net names]
// ember builds its models as nn::Sequential, whose parameters are named by position (0.weight,
// 2.weight, ...), as PyTorch's nn.Sequential names them; a file from `mnist_train --save` or from
// a PyTorch nn.Sequential of the same layers loads as it is. PyTorch's own MNIST example
// (pytorch/examples, mnist/main.py) writes its CNN as a class, `Net`, whose tensors are named
// after its attributes. Its layers are those of nn::cnn (layers/models.h) in the same order, so
// its files load into nn::cnn once each layer's name is replaced by its position there:
//
//   Net (its attribute)          tensors                      nn::cnn (its index)
//   conv1 = Conv2d(1, C1, 3)     conv1.weight [C1, 1, 3, 3]   0
//   conv2 = Conv2d(C1, C2, 3)    conv2.weight [C2, C1, 3, 3]  2
//   fc1 = Linear(C2·12·12, H)    fc1.weight [H, C2·12·12]     7   (for 28×28 images)
//   fc2 = Linear(H, classes)     fc2.weight [classes, H]      10
//
// and a bias of as many values beside each weight. The ReLUs, the max pooling, the dropouts and
// the flattening hold no tensors (Net calls them as functions or parameter-free modules; nn::cnn
// has them at 1, 3, 4, 5, 6, 8 and 9). A file is taken for a Net when its tensors are exactly these
// eight (keys under "optimizer." aside) and their shapes are those of an nn::cnn for the input
// size; any widths C1, C2, H and any class count do. The table is kExampleNetNames; everything
// that reads or names such files (model_card.cpp, mnist_predict) goes through this header.
#pragma once

#include <cstdint>
#include <string>

#include "core/io/serialize.h"

namespace ember::apps {

struct NameAlias {
  const char* theirs;  // the layer's name in the file
  const char* ours;    // its index in nn::cnn
};
inline constexpr NameAlias kExampleNetNames[] = {{"conv1", "0"}, {"conv2", "2"}, {"fc1", "7"}, {"fc2", "10"}};

enum class Naming {
  ember,        // every tensor named <index>.<name>: an nn::Sequential, ember's or PyTorch's
  example_net,  // exactly the eight tensors of pytorch/examples' Net
  vit,          // torchvision's VisionTransformer: class_token, conv_proj.*, encoder.*, heads.head.*
  unknown,      // neither
};

// The tensors of a model file, without those under "optimizer." (an ember 0.1 single-file
// checkpoint kept its optimizer's state beside the model).
StateDict model_tensors(const StateDict& file_tensors);

// Which naming the model's tensors follow (by their keys alone; the shapes are checked by
// from_example_net and the model builders).
Naming naming_of(const StateDict& tensors);

// A Net's tensors under nn::cnn's names, after checking that their shapes are those of an nn::cnn
// for `height`×`width` images; FormatError naming `path`, with the shapes found and those needed,
// otherwise.
StateDict from_example_net(const StateDict& tensors, const std::string& path, std::int64_t height, std::int64_t width);

// "a CNN with conv1.*, conv2.*, fc1.*, fc2.* (pytorch/examples' MNIST Net), which ember's cnn
// loads renamed (conv1 → 0, ...)": for messages about a Net file.
std::string example_net_text();

// The first `shown` tensors with their shapes and the count, "a.weight [4, 3], a.bias [4], ... (9
// tensors)": what a file holds, for messages about files ember cannot read.
std::string describe_tensors(const StateDict& tensors, std::size_t shown = 6);

// The FormatError for a file whose tensors follow no naming ember reads: what it holds, and the
// three models ember builds from a file.
[[noreturn]] void throw_unrecognised(const StateDict& tensors, const std::string& path);

// FormatError naming `path` and the tensor when a floating-point tensor holds NaN or an infinity
// (such a model's outputs are NaN whatever its input).
void check_finite(const StateDict& tensors, const std::string& path);

}  // namespace ember::apps
