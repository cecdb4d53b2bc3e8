// Model cards: reading and writing a model's description in its checkpoint's metadata.
#include "apps/common/model_card.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/common/model_names.h"
#include "apps/common/program.h"
#include "base/error.h"
#include "layers/models.h"
#include "layers/nn.h"

namespace ember::apps {
namespace {

std::string float_text(float v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.9g", static_cast<double>(v));  // round-trips a float
  return buffer;
}

float parse_float(const std::string& path, const std::string& key, const std::string& text) {
  try {
    std::size_t used = 0;
    const float v = std::stof(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw FormatError(detail::concat(path, ": metadata '", key, "' is not a number: '", text.substr(0, 40), "'"));
}

// The Linear layer at the end of either architecture: its row count is the class count.
std::int64_t output_classes(const StateDict& tensors, const std::string& kind) {
  if (kind == "vit") {
    const Tensor* w = find_tensor(tensors, "heads.head.weight");
    return w && w->dim() == 2 ? w->size(0) : 0;
  }
  if (kind == "cnn") {
    const Tensor* w = find_tensor(tensors, "10.weight");
    return w && w->dim() == 2 ? w->size(0) : 0;
  }
  std::int64_t out = 0;
  int last = -1;
  for (const auto& [name, t] : tensors) {
    const std::size_t dot = name.find('.');
    if (name.substr(dot + 1) != "weight" || t.dim() != 2) continue;
    const std::string index = name.substr(0, dot);
    if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos || index.size() > 6) continue;
    if (std::stoi(index) > last) {
      last = std::stoi(index);
      out = t.size(0);
    }
  }
  return out;
}

// The model's tensors under ember's names, checked finite: a Net's renamed for `height`×`width`
// images (Note [pytorch/examples' Net names]), ember's as they are; FormatError naming `path` for
// a file of neither naming, or one that is a Net where `kind` is not cnn.
StateDict ember_tensors(const StateDict& file_tensors, const std::string& path, const std::string& kind,
                        std::int64_t height, std::int64_t width) {
  StateDict tensors = model_tensors(file_tensors);
  check_finite(tensors, path);  // before renaming: the message names the file's tensor
  switch (naming_of(tensors)) {
    case Naming::ember:
    case Naming::vit:
      return tensors;
    case Naming::example_net:
      if (kind != "cnn")
        throw FormatError(
            detail::concat(path, " holds ", example_net_text(), "; the model it is to load into is an ", kind));
      return from_example_net(tensors, path, height, width);
    case Naming::unknown:
      break;
  }
  throw_unrecognised(tensors, path);
}
}  // namespace

std::map<std::string, std::string> ModelCard::to_metadata() const {
  std::map<std::string, std::string> meta{{"model_kind", kind},
                                          {"input_shape", detail::concat(height, ",", width)},
                                          {"classes", nlohmann::json(classes).dump()},
                                          {"dataset", dataset},
                                          {"preprocess", preprocess},
                                          {"input_mean", float_text(normalization.mean)},
                                          {"input_std", float_text(normalization.std)}};
  if (!hidden.empty()) meta["hidden"] = join_sizes(hidden);
  if (!channels.empty()) meta["channels"] = join_sizes(channels);
  if (kind == "vit") meta["heads"] = std::to_string(vit.heads);
  return meta;
}

ModelCard card_for(const data::ClassificationData& data, const std::string& kind, bool normalized) {
  const Shape image = data.train->sample_shape();
  return {.kind = kind,
          .height = image[0],
          .width = image[1],
          .classes = data.class_names,
          .dataset = data.spec.name,
          .preprocess = data.spec.preprocess,
          .normalization = normalized ? data.normalization : data::Normalization{},
          .normalization_assumed = {},
          .hidden = {},
          .channels = {},
          .vit = {}};
}

std::shared_ptr<nn::Module> new_model(const ModelCard& card, Generator* init, const FusionOptions& fusion) {
  const auto classes = static_cast<std::int64_t>(card.classes.size());
  if (card.kind == "vit") {
    nn::VitShape shape = card.vit;
    shape.height = card.height, shape.width = card.width, shape.classes = classes;
    return nn::vit(shape, init);
  }
  if (card.kind == "mlp") return nn::mlp(card.height * card.width, card.hidden, classes, init, fusion);
  EMBER_CHECK(card.kind == "cnn" && card.hidden.size() == 1 && card.channels.size() == 2, ValueError,
              "a new model needs kind mlp, or kind cnn with one hidden width and two channel widths; the card has ",
              card.kind, " with ", card.hidden.size(), " and ", card.channels.size());
  return nn::cnn({.c1 = card.channels[0],
                  .c2 = card.channels[1],
                  .hidden = card.hidden[0],
                  .height = card.height,
                  .width = card.width,
                  .classes = classes},
                 init, fusion);
}

ModelCard read_model_card(const Checkpoint& file, const std::string& path) {
  const auto& meta = file.metadata;
  auto get = [&](const char* key) -> const std::string* {
    const auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  ModelCard card;
  const StateDict tensors = model_tensors(file.tensors);
  const Naming naming = naming_of(tensors);
  if (naming == Naming::unknown) throw_unrecognised(tensors, path);
  const Tensor* first = find_tensor(tensors, "0.weight");
  card.kind = get("model_kind")               ? *get("model_kind")
              : naming == Naming::vit         ? "vit"
              : naming == Naming::example_net ? "cnn"
              : first && first->dim() == 4    ? "cnn"
                                              : "mlp";
  if (card.kind != "mlp" && card.kind != "cnn" && card.kind != "vit")
    throw FormatError(detail::concat(path, ": model_kind '", card.kind, "' is none of mlp, cnn and vit"));
  if (const std::string* heads = get("heads")) {
    card.vit.heads = static_cast<std::int64_t>(parse_float(path, "heads", *heads));
    if (card.vit.heads < 1) throw FormatError(detail::concat(path, ": metadata heads must be positive"));
  }

  if (const std::string* shape = get("input_shape")) {
    long long h = 0, w = 0;
    char tail = 0;
    if (std::sscanf(shape->c_str(), "%lld,%lld%c", &h, &w, &tail) != 2 || h <= 0 || w <= 0 || h > 65536 || w > 65536)
      throw FormatError(
          detail::concat(path, ": metadata input_shape '", shape->substr(0, 40), "' is not HEIGHT,WIDTH"));
    card.height = h;
    card.width = w;
  } else if (card.kind == "mlp" && first && first->dim() == 2 && first->size(1) != 784) {
    // No size recorded: a square image of the model's input count, if there is one.
    const auto side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(first->size(1)))));
    if (side * side != first->size(1))
      throw FormatError(detail::concat(path, ": the model takes ", first->size(1),
                                       " inputs, which is no square image, "
                                       "and its file does not say the image size (metadata input_shape)"));
    card.height = card.width = side;
  }

  // The Net's tensors renamed (and their shapes checked) once the image size is known.
  const StateDict named =
      naming == Naming::example_net ? ember_tensors(tensors, path, card.kind, card.height, card.width) : tensors;
  if (const std::string* classes = get("classes")) {
    try {
      card.classes = nlohmann::json::parse(*classes).get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception&) {
      throw FormatError(detail::concat(path, ": metadata 'classes' is not a JSON list of names"));
    }
  } else {
    for (std::int64_t c = 0; c < output_classes(named, card.kind); ++c) card.classes.push_back(std::to_string(c));
  }
  const std::int64_t outputs = output_classes(named, card.kind);
  if (static_cast<std::int64_t>(card.classes.size()) != outputs)
    throw FormatError(detail::concat(path, ": the metadata names ", card.classes.size(), " classes but the model has ",
                                     outputs, " outputs"));

  if (const std::string* d = get("dataset")) card.dataset = *d;
  if (const std::string* p = get("preprocess"))
    card.preprocess = *p;
  else if (card.height != 28 || card.width != 28)
    card.preprocess = "plain";
  if (get("input_mean") && get("input_std")) {
    card.normalization = {parse_float(path, "input_mean", *get("input_mean")),
                          parse_float(path, "input_std", *get("input_std"))};
    if (!(card.normalization.std > 0)) throw FormatError(detail::concat(path, ": metadata input_std must be positive"));
  } else if (get("normalize")) {
    // ember 0.1's --normalize: MNIST's figures, else pixel/255.
    if (*get("normalize") == "1") card.normalization = {0.1307f, 0.3081f};
  } else if (naming == Naming::example_net) {
    card.normalization = {0.1307f, 0.3081f};
    card.normalization_assumed =
        "pytorch/examples' Normalize((0.1307,), (0.3081,)), with which its script trains and tests the Net";
  } else {
    card.normalization_assumed = "pixel/255 (mean 0, std 1)";
  }
  return card;
}

std::shared_ptr<nn::Module> build_model(const ModelCard& card, const Checkpoint& file, const std::string& path) {
  const StateDict weights = ember_tensors(file.tensors, path, card.kind, card.height, card.width);
  std::shared_ptr<nn::Module> model;
  if (card.kind == "vit") {
    model = nn::vit(nn::vit_shape_of(weights, path, card.vit.heads, card.height, card.width));
  } else if (card.kind == "cnn") {
    model = nn::cnn(nn::cnn_shape_of(weights, path, card.height, card.width));
  } else {
    const nn::MlpShape shape = nn::mlp_shape_of(weights, path);
    if (shape.in_features != card.height * card.width)
      throw FormatError(detail::concat(path, ": the model takes ", shape.in_features, " inputs, not the ", card.height,
                                       "×", card.width, " pixels of its images"));
    model = nn::mlp(shape.in_features, shape.hidden, shape.out_features);
  }
  try {
    model->load_state_dict(weights);
  } catch (const ValueError& e) {
    throw FormatError(detail::concat(path, ": ", e.what()));
  }
  return model;
}

std::map<std::string, std::string> load_weights(nn::Module& model, const ModelCard& card, const std::string& path) {
  const Checkpoint file = load_safetensors(path, Device::cpu());
  const bool renamed = naming_of(model_tensors(file.tensors)) == Naming::example_net;
  const StateDict weights = ember_tensors(file.tensors, path, card.kind, card.height, card.width);
  try {
    model.load_state_dict(weights);
  } catch (const ValueError& e) {
    // A renamed file's mismatches are reported under ember's names: say which of the file's they are.
    throw ValueError(
        detail::concat(path, renamed ? detail::concat(" (", example_net_text(), ")") : "", ": ", e.what()));
  }
  return file.metadata;
}

}  // namespace ember::apps
