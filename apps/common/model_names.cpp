// The names in model files: ember's, pytorch/examples' Net's (Note [pytorch/examples' Net names]).
#include "apps/common/model_names.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "layers/models.h"

namespace ember::apps {
namespace {

bool is_index(const std::string& text) {
  return !text.empty() && text.size() <= 6 && text.find_first_not_of("0123456789") == std::string::npos;
}

// The Net's eight tensor names, in its order: conv1.weight, conv1.bias, conv2.weight, ...
std::vector<std::string> example_net_keys() {
  std::vector<std::string> keys;
  for (const NameAlias& alias : kExampleNetNames)
    for (const char* field : {".weight", ".bias"}) keys.push_back(std::string(alias.theirs) + field);
  return keys;
}

}  // namespace

StateDict model_tensors(const StateDict& file_tensors) {
  StateDict model;
  for (const auto& [name, t] : file_tensors)
    if (name.rfind("optimizer.", 0) != 0) model.emplace_back(name, t);
  return model;
}

Naming naming_of(const StateDict& tensors) {
  const std::vector<std::string> net = example_net_keys();
  const bool all_net = tensors.size() == net.size() && std::all_of(net.begin(), net.end(), [&](const std::string& k) {
                         return find_tensor(tensors, k) != nullptr;
                       });
  if (all_net) return Naming::example_net;
  if (find_tensor(tensors, "class_token") && find_tensor(tensors, "conv_proj.weight") &&
      find_tensor(tensors, "heads.head.weight"))
    return Naming::vit;
  const bool all_indexed = !tensors.empty() && std::all_of(tensors.begin(), tensors.end(), [](const auto& entry) {
    const std::string& name = entry.first;
    const std::size_t dot = name.find('.');
    return dot != std::string::npos && is_index(name.substr(0, dot));
  });
  return all_indexed ? Naming::ember : Naming::unknown;
}

StateDict from_example_net(const StateDict& tensors, const std::string& path, std::int64_t height, std::int64_t width) {
  auto shape = [&](const std::string& key) {
    const Tensor* t = find_tensor(tensors, key);
    return t ? t->shape() : Shape{};  // (missing: fails the check below)
  };
  const Shape w1 = shape("conv1.weight"), w2 = shape("conv2.weight"), f1 = shape("fc1.weight"),
              f2 = shape("fc2.weight");
  const nn::CnnShape cnn{.c1 = w1.empty() ? 0 : w1[0],
                         .c2 = w2.empty() ? 0 : w2[0],
                         .hidden = f1.empty() ? 0 : f1[0],
                         .height = height,
                         .width = width,
                         .classes = f2.empty() ? 0 : f2[0]};
  const std::int64_t side_h = (height - 4) / 2, side_w = (width - 4) / 2;
  const bool fits = height >= 6 && width >= 6 && w1 == Shape{cnn.c1, 1, 3, 3} && w2 == Shape{cnn.c2, cnn.c1, 3, 3} &&
                    f1 == Shape{cnn.hidden, cnn.flat_features()} && f2 == Shape{cnn.classes, cnn.hidden} &&
                    shape("conv1.bias") == Shape{cnn.c1} && shape("conv2.bias") == Shape{cnn.c2} &&
                    shape("fc1.bias") == Shape{cnn.hidden} && shape("fc2.bias") == Shape{cnn.classes} && cnn.c1 > 0 &&
                    cnn.c2 > 0 && cnn.hidden > 0 && cnn.classes > 0;
  if (!fits) {
    std::string found;
    for (const std::string& key : example_net_keys())
      found += detail::concat(found.empty() ? "" : ", ", key, " ", shape_str(shape(key)));
    throw FormatError(detail::concat(
        path, ": the tensors have the names of pytorch/examples' MNIST Net (conv1.*, conv2.*, fc1.*, fc2.*) but not ",
        "the shapes of ember's cnn for ", height, "×", width, " images: the file holds ", found,
        "; ember's cnn needs conv1.weight [C1, 1, 3, 3], conv2.weight [C2, C1, 3, 3], fc1.weight [H, C2·", side_h, "·",
        side_w, "], fc2.weight [classes, H], each bias as long as its weight's first dimension",
        height == 28 && width == 28 ? " (for images of another size, record it in the metadata as input_shape)" : ""));
  }
  StateDict renamed;
  for (const NameAlias& alias : kExampleNetNames)
    for (const char* field : {".weight", ".bias"}) {
      const std::string theirs = std::string(alias.theirs) + field;
      renamed.emplace_back(std::string(alias.ours) + field, *find_tensor(tensors, theirs));
    }
  return renamed;
}

std::string example_net_text() {
  std::string names, renames;
  for (const NameAlias& alias : kExampleNetNames) {
    names += detail::concat(names.empty() ? "" : ", ", alias.theirs, ".*");
    renames += detail::concat(renames.empty() ? "" : ", ", alias.theirs, " → ", alias.ours);
  }
  return detail::concat("a CNN with ", names,
                        " (pytorch/examples' MNIST Net), which ember's cnn matches after renaming (", renames, ")");
}

std::string describe_tensors(const StateDict& tensors, std::size_t shown) {
  if (tensors.empty()) return "no tensors";
  std::string text;
  for (std::size_t i = 0; i < tensors.size() && i < shown; ++i)
    text += detail::concat(i == 0 ? "" : ", ", tensors[i].first, " ", shape_str(tensors[i].second.shape()));
  if (tensors.size() > shown) text += ", ...";
  return detail::concat(text, " (", tensors.size(), tensors.size() == 1 ? " tensor)" : " tensors)");
}

void throw_unrecognised(const StateDict& tensors, const std::string& path) {
  bool some_net_names = false;
  for (const auto& [name, t] : tensors)
    for (const NameAlias& alias : kExampleNetNames)
      some_net_names = some_net_names || name.rfind(std::string(alias.theirs) + ".", 0) == 0;
  std::string net_keys;
  for (const std::string& key : example_net_keys()) net_keys += (net_keys.empty() ? "" : ", ") + key;
  throw FormatError(detail::concat(
      path, ": not a model ember can build: the file holds ", describe_tensors(tensors),
      some_net_names ? detail::concat(", some of the names of pytorch/examples' MNIST Net but not exactly its eight "
                                      "tensors (",
                                      net_keys, ")")
                     : "",
      ". ember builds an MLP (0.weight, 0.bias, 2.weight, ...: Linear layers at 0, 2, 4, ... with ReLUs between), ",
      "its CNN (0.*, 2.*, 7.*, 10.*: nn::cnn in layers/models.h), and ", example_net_text()));
}

void check_finite(const StateDict& tensors, const std::string& path) {
  for (const auto& [name, t] : tensors) {
    if (!is_floating(t.dtype())) continue;
    const std::vector<double> values = t.to(DType::f64).to_vector<double>();
    if (!std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); }))
      throw FormatError(detail::concat(path, ": tensor ", name, " holds NaN or infinite values"));
  }
}

}  // namespace ember::apps
