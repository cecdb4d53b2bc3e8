// Ready-made models: the tutorials' multi-layer perceptron, and recovering its architecture from
// a checkpoint's tensor shapes (so a model saved by ember or exported from PyTorch can be rebuilt
// without knowing its sizes in advance).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/random.h"
#include "core/serialize.h"
#include "layers/layers.h"

namespace ember::nn {

// Sequential(Linear(in, h1), ReLU, Linear(h1, h2), ReLU, ..., Linear(hk, out)); with no hidden
// sizes, a single Linear(in, out). Parameters are named 0.weight, 0.bias, 2.weight, ... as in
// PyTorch's nn.Sequential of the same layers.
std::shared_ptr<Sequential> mlp(std::int64_t in_features, const std::vector<std::int64_t>& hidden,
                                std::int64_t out_features, Generator* generator = nullptr);

// The CNN of PyTorch's MNIST example, for 28×28 images: Conv2d(1, c1, 3), ReLU, Conv2d(c1, c2, 3),
// ReLU, MaxPool2d(2), Dropout(0.25), Flatten, Linear(c2·12·12, hidden), ReLU, Dropout(0.5),
// Linear(hidden, 10) — parameters 0.*, 2.*, 7.*, 10.*, as in that example. Input [B, 1, 28, 28].
std::shared_ptr<Sequential> cnn(std::int64_t c1 = 32, std::int64_t c2 = 64, std::int64_t hidden = 128,
                                Generator* generator = nullptr);

struct CnnShape {
  std::int64_t c1 = 0, c2 = 0, hidden = 0;
};
// The CNN whose state dict this is (from its tensor shapes), or a FormatError saying why not.
CnnShape cnn_shape_of(const StateDict& state, const std::string& name);

struct MlpShape {
  std::int64_t in_features = 0, out_features = 0;
  std::vector<std::int64_t> hidden;
};

// The MLP whose state dict this is (keys "<i>.weight"/"<i>.bias" with i = 0, 2, 4, ...), or a
// FormatError saying why it is not one. Keys under "optimizer." are ignored.
MlpShape mlp_shape_of(const StateDict& state, const std::string& name);

}  // namespace ember::nn
