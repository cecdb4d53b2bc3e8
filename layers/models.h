// Ready-made models: the tutorials' multi-layer perceptron and the MNIST example's CNN, and recovering
// their architecture from
// a checkpoint's tensor shapes (so a model saved by ember or exported from PyTorch can be rebuilt
// without knowing its sizes in advance).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/io/serialize.h"
#include "core/tensor/random.h"
#include "layers/container.h"

namespace ember::nn {

// Sequential(Linear(in, h1), ReLU, Linear(h1, h2), ReLU, ..., Linear(hk, out)); with no hidden
// sizes, a single Linear(in, out). Parameters are named 0.weight, 0.bias, 2.weight, ... as in
// PyTorch's nn.Sequential of the same layers. `fusion` picks the fused runs (Sequential::fuse);
// by default only those that keep values bit for bit, which for an MLP is none.
std::shared_ptr<Sequential> mlp(std::int64_t in_features, const std::vector<std::int64_t>& hidden,
                                std::int64_t out_features, Generator* generator = nullptr,
                                const FusionOptions& fusion = {});

// The CNN of PyTorch's MNIST example (pytorch/examples, mnist/main.py): Conv2d(1, c1, 3), ReLU,
// Conv2d(c1, c2, 3), ReLU, MaxPool2d(2), Dropout(0.25), Flatten, Linear(c2·⌊(H−4)/2⌋·⌊(W−4)/2⌋,
// hidden), ReLU, Dropout(0.5), Linear(hidden, classes), as a Sequential: its parameters are named
// by index, 0.*, 2.*, 7.* and 10.*, where the example's class `Net` names the same four layers
// conv1.*, conv2.*, fc1.* and fc2.* (conv1 → 0, conv2 → 2, fc1 → 7, fc2 → 10; the programs rename
// a Net file's tensors so: Note [pytorch/examples' Net names] in apps/common/model_names.h).
// Input [B, 1, H, W]; for MNIST's 28×28 the dense layer takes c2·12·12.
struct CnnShape {
  std::int64_t c1 = 32, c2 = 64, hidden = 128;
  std::int64_t height = 28, width = 28;  // input image size, at least 6×6
  std::int64_t classes = 10;
  std::int64_t flat_features() const { return c2 * ((height - 4) / 2) * ((width - 4) / 2); }
};
// `fusion` picks the fused runs (Sequential::fuse): by default Conv2d→ReLU→MaxPool2d and
// Conv2d→ReLU, bit for bit the same as unfused.
std::shared_ptr<Sequential> cnn(const CnnShape& shape, Generator* generator = nullptr,
                                const FusionOptions& fusion = {});
// The MNIST-sized CNN (28×28 inputs, 10 classes).
std::shared_ptr<Sequential> cnn(std::int64_t c1 = 32, std::int64_t c2 = 64, std::int64_t hidden = 128,
                                Generator* generator = nullptr);

// The CNN whose state dict this is (from its tensor shapes), for inputs of `height`×`width`, or a
// FormatError saying why not.
CnnShape cnn_shape_of(const StateDict& state, const std::string& name, std::int64_t height = 28,
                      std::int64_t width = 28);

struct MlpShape {
  std::int64_t in_features = 0, out_features = 0;
  std::vector<std::int64_t> hidden;
};

// The MLP whose state dict this is (keys "<i>.weight"/"<i>.bias" with i = 0, 2, 4, ...), or a
// FormatError saying why it is not one. Keys under "optimizer." are ignored.
MlpShape mlp_shape_of(const StateDict& state, const std::string& name);

}  // namespace ember::nn
