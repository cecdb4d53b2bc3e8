// The model builders and their inverses.
#include "layers/models.h"

#include <map>

#include "base/error.h"
#include "layers/activation.h"
#include "layers/conv.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/pooling.h"

namespace ember::nn {

std::shared_ptr<Sequential> mlp(std::int64_t in_features, const std::vector<std::int64_t>& hidden,
                                std::int64_t out_features, Generator* generator, const FusionOptions& fusion) {
  auto model = std::make_shared<Sequential>();
  std::int64_t width = in_features;
  for (std::int64_t h : hidden) {
    model->append(std::make_shared<Linear>(width, h, true, generator));
    model->append(std::make_shared<ReLU>());
    width = h;
  }
  model->append(std::make_shared<Linear>(width, out_features, true, generator));
  model->fuse(fusion);
  return model;
}

std::shared_ptr<Sequential> cnn(const CnnShape& shape, Generator* generator, const FusionOptions& fusion) {
  EMBER_CHECK(shape.height >= 6 && shape.width >= 6, ShapeError, "cnn: inputs of ", shape.height, "×", shape.width,
              " are too small: two 3×3 convolutions and a 2×2 pooling need at least 6×6");
  EMBER_CHECK(shape.c1 > 0 && shape.c2 > 0 && shape.hidden > 0 && shape.classes > 0, ValueError,
              "cnn: channels, hidden width and classes must be positive");
  Generator& g = generator ? *generator : default_generator();
  auto model = std::make_shared<Sequential>();
  model->append(std::make_shared<Conv2d>(1, shape.c1, 3, 1, 0, true, &g));
  model->append(std::make_shared<ReLU>());
  model->append(std::make_shared<Conv2d>(shape.c1, shape.c2, 3, 1, 0, true, &g));
  model->append(std::make_shared<ReLU>());
  model->append(std::make_shared<MaxPool2d>(2));
  model->append(std::make_shared<Dropout>(0.25, g.next_u64()));
  model->append(std::make_shared<Flatten>());
  model->append(std::make_shared<Linear>(shape.flat_features(), shape.hidden, true, &g));
  model->append(std::make_shared<ReLU>());
  model->append(std::make_shared<Dropout>(0.5, g.next_u64()));
  model->append(std::make_shared<Linear>(shape.hidden, shape.classes, true, &g));
  model->fuse(fusion);
  return model;
}

std::shared_ptr<Sequential> cnn(std::int64_t c1, std::int64_t c2, std::int64_t hidden, Generator* generator) {
  return cnn(CnnShape{.c1 = c1, .c2 = c2, .hidden = hidden}, generator);
}

CnnShape cnn_shape_of(const StateDict& state, const std::string& name, std::int64_t height, std::int64_t width) {
  auto shape = [&](const char* key) -> Shape {
    const Tensor* t = find_tensor(state, key);
    if (!t) throw FormatError(detail::concat(name, ": not a CNN checkpoint: no '", key, "'"));
    return t->shape();
  };
  const Shape w0 = shape("0.weight"), w2 = shape("2.weight"), w7 = shape("7.weight"), w10 = shape("10.weight");
  CnnShape c{.height = height, .width = width};
  const bool convs = w0.size() == 4 && w0[1] == 1 && w2.size() == 4 && w2[1] == w0[0];
  if (convs) {
    c.c1 = w0[0];
    c.c2 = w2[0];
  }
  if (!convs || w7.size() != 2 || w7[1] != c.flat_features() || w10.size() != 2 || w10[1] != w7[0])
    throw FormatError(detail::concat(name, ": the tensor shapes are not those of ember's CNN for ", height, "×", width,
                                     " images (0.weight ", shape_str(w0), ", 2.weight ", shape_str(w2), ", 7.weight ",
                                     shape_str(w7), ", 10.weight ", shape_str(w10), ")"));
  c.hidden = w7[0];
  c.classes = w10[0];
  return c;
}

MlpShape mlp_shape_of(const StateDict& state, const std::string& name) {
  std::map<int, Shape> weights;  // layer index → weight shape
  for (const auto& [key, tensor] : state) {
    if (key.rfind("optimizer.", 0) == 0) continue;
    const std::size_t dot = key.find('.');
    const std::string index = key.substr(0, dot), field = dot == std::string::npos ? "" : key.substr(dot + 1);
    const bool numeric =
        !index.empty() && index.size() < 6 && index.find_first_not_of("0123456789") == std::string::npos;
    if (!numeric || (field != "weight" && field != "bias"))
      throw FormatError(detail::concat(name, ": not an MLP checkpoint: unexpected tensor '", key,
                                       "' (expected 0.weight, 0.bias, 2.weight, ...)"));
    if (field == "weight") {
      if (tensor.dim() != 2)
        throw FormatError(
            detail::concat(name, ": '", key, "' should be a matrix, it has shape ", shape_str(tensor.shape())));
      weights[std::stoi(index)] = tensor.shape();
    }
  }
  if (weights.empty()) throw FormatError(detail::concat(name, ": not an MLP checkpoint: no layer weights"));
  MlpShape shape;
  int expected_index = 0;
  std::int64_t width = -1;
  for (const auto& [index, w] : weights) {
    if (index != expected_index)
      throw FormatError(detail::concat(name, ": not an MLP checkpoint: layer ", index, " where ", expected_index,
                                       " was expected (Linear layers at 0, 2, 4, ... with ReLU between)"));
    if (width < 0)
      shape.in_features = w[1];
    else if (w[1] != width)
      throw FormatError(
          detail::concat(name, ": layer ", index, " takes ", w[1], " inputs but the previous one gives ", width));
    if (index > 0) shape.hidden.push_back(width);
    width = w[0];
    expected_index += 2;
  }
  shape.out_features = width;
  return shape;
}

}  // namespace ember::nn
