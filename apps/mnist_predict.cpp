// mnist_predict: classifies pictures — image files (PNG, JPEG, BMP), prepared the way the
// model's dataset was made, or samples of an IDX file — with a model trained by mnist_train (or
// exported from PyTorch, pytorch/examples' MNIST Net among them), on any device, and prints the
// three likeliest classes by name.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "apps/common/image_file.h"
#include "apps/common/images.h"
#include "apps/common/model_card.h"
#include "apps/common/program.h"
#include "core/io/serialize.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "data/idx.h"
#include "layers/nn.h"

using namespace ember;
using apps::UsageError;

namespace {

struct Settings {
  std::string model_path, device = "auto", idx_path, grid_path, normalize;
  std::vector<long long> indices;
  long long count = 1;
  std::int64_t max_pixels = apps::kDefaultMaxPixels;
  bool json = false;
  std::vector<std::string> images;
};

struct Input {
  std::string name;  // file, or "FILE[N]" for an IDX sample
  std::vector<std::uint8_t> pixels;
  int truth = -1;
};

// The labels file that goes with an IDX images file (…-images-idx3-ubyte → …-labels-idx1-ubyte).
std::string labels_path_for(const std::string& images) {
  std::string p = images;
  const std::size_t at = p.find("images-idx3");
  if (at == std::string::npos) return "";
  p.replace(at, 11, "labels-idx1");
  return std::filesystem::exists(p) ? p : "";
}

// The model and its card; every problem with the file is a usage error naming it.
std::pair<std::shared_ptr<nn::Module>, apps::ModelCard> load_model(const std::string& path) {
  try {
    const Checkpoint file = load_safetensors(path, Device::cpu());
    apps::ModelCard card = apps::read_model_card(file, path);
    return {apps::build_model(card, file, path), card};
  } catch (const Error& e) {
    throw UsageError(std::string("--model ") + e.what());
  }
}

// --normalize MEAN,STD, or a usage error showing the form.
data::Normalization parse_normalize(const std::string& text) {
  float mean = 0, std = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%f,%f%c", &mean, &std, &tail) != 2 || !std::isfinite(mean) || !std::isfinite(std) ||
      !(std > 0))
    throw UsageError("--normalize " + text +
                     ": expected MEAN,STD with STD positive, e.g. 0.1307,0.3081 (MNIST's), or 0,1 for pixel/255");
  return {mean, std};
}

// The input scaling: --normalize, else the file's; a warning on stderr when the file records none
// (the keys: apps/common/model_card.h).
void choose_scaling(const Settings& s, apps::ModelCard& card) {
  if (!s.normalize.empty()) {
    card.normalization = parse_normalize(s.normalize);
  } else if (!card.normalization_assumed.empty()) {
    const bool plain = card.normalization.mean == 0.0f && card.normalization.std == 1.0f;
    std::fprintf(stderr,
                 "warning: --model %s records no input scaling (metadata input_mean, input_std): assuming %s; if the "
                 "model was trained otherwise, give --normalize MEAN,STD (%s), or record input_mean and input_std "
                 "in the file's metadata\n",
                 s.model_path.c_str(), card.normalization_assumed.c_str(),
                 plain ? "MNIST's are 0.1307,0.3081" : "0,1 for pixel/255");
  }
}

std::vector<Input> idx_inputs(const Settings& s, const apps::ModelCard& card) {
  Tensor images;
  try {
    images = data::read_idx(s.idx_path);
  } catch (const Error& e) {
    throw UsageError(std::string("--idx ") + e.what());
  }
  if (images.dim() != 3 || images.size(1) != card.height || images.size(2) != card.width)
    throw UsageError(detail::concat("--idx ", s.idx_path, ": expected ", card.height, "×", card.width,
                                    " images (the model's input), the file has shape ", shape_str(images.shape())));
  Tensor labels;
  if (const std::string lp = labels_path_for(s.idx_path); !lp.empty()) labels = data::read_idx(lp);
  const std::int64_t numel = card.height * card.width;
  const std::int64_t n = images.size(0);
  std::vector<Input> inputs;
  for (long long first : s.indices.empty() ? std::vector<long long>{0} : s.indices) {
    if (first < 0 || first >= n)
      throw UsageError(detail::concat("--index ", first, ": out of range: ", s.idx_path, " has ", n,
                                      " images, numbered 0 to ", n - 1));
    // The values the user typed, not the sample where the range ends.
    if (s.count > n)
      throw UsageError(detail::concat("--count ", s.count, " with --index ", first, ": ", s.idx_path, " has only ", n,
                                      " images; give --count ", n, " at most"));
    if (s.count > n - first)
      throw UsageError(detail::concat("--index ", first, " with --count ", s.count, " reaches image ",
                                      first + s.count - 1, ", past the last of ", s.idx_path, "'s ", n, " images (",
                                      n - 1, "): the last start for --count ", s.count, " is ", n - s.count));
    for (long long i = first; i < first + s.count; ++i) {
      const std::uint8_t* p = images.data<std::uint8_t>() + i * numel;
      Input in{detail::concat(s.idx_path, "[", i, "]"), std::vector<std::uint8_t>(p, p + numel), -1};
      if (labels.defined() && i < labels.size(0)) in.truth = labels.data<std::uint8_t>()[i];
      inputs.push_back(std::move(in));
    }
  }
  return inputs;
}

// Class probabilities per input, one row each, in batches (a CNN's activations for all of an IDX
// file's 10,000 images at once would take gigabytes). Outputs that are not finite — from finite
// weights (build_model checks them), the arithmetic overflowing float's range — are refused,
// naming the first input that gives them: their probabilities would be NaN.
std::vector<float> classify(nn::Module& model, const Settings& s, const apps::ModelCard& card,
                            const std::vector<Input>& inputs, Device device) {
  constexpr std::size_t kBatch = 256;
  NoGradGuard no_grad;
  std::vector<float> probs;
  for (std::size_t begin = 0; begin < inputs.size(); begin += kBatch) {
    const std::size_t end = std::min(inputs.size(), begin + kBatch);
    std::vector<std::uint8_t> batch;
    for (std::size_t i = begin; i < end; ++i)
      batch.insert(batch.end(), inputs[i].pixels.begin(), inputs[i].pixels.end());
    const auto n = static_cast<std::int64_t>(end - begin);
    const Shape shape = card.kind != "mlp" ? Shape{n, 1, card.height, card.width} : Shape{n, card.height * card.width};
    const Tensor x =
        normalize_u8(from_vector(batch, shape).to(device), card.normalization.mean, card.normalization.std);
    const Tensor logits = model(x);
    const std::vector<float> values = logits.to_vector<float>();
    const auto bad = std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
    if (bad != values.end())
      throw UsageError(detail::concat(
          "--model ", s.model_path, ": the model's outputs for ",
          inputs[begin + (bad - values.begin()) / logits.size(1)].name,
          " are not finite (NaN or infinite): its weights are finite, but its arithmetic overflows float's range"));
    const std::vector<float> p = softmax(logits).to_vector<float>();
    probs.insert(probs.end(), p.begin(), p.end());
  }
  return probs;
}

int predict(const Settings& s) {
  if (s.images.empty() && s.idx_path.empty())
    throw UsageError("nothing to classify: give image files, or --idx FILE --index N");
  if (!s.indices.empty() && s.idx_path.empty()) throw UsageError("--index needs --idx FILE");
  if (s.count < 1) throw UsageError("--count must be positive");
  if (s.max_pixels < 1) throw UsageError("--max-pixels must be positive");
  std::string device_reason;
  const Device device = apps::choose_device("--device", s.device, device_reason);
  auto [model, card] = load_model(s.model_path);
  choose_scaling(s, card);
  model->to(device);
  model->eval();

  // The inputs, decoded one at a time (only each 28×28 result is kept, so memory does not grow with
  // the number of files); a file that cannot be read or holds nothing to classify is reported and
  // skipped.
  std::vector<Input> inputs;
  int failures = 0;
  for (const std::string& path : s.images) {
    try {
      inputs.push_back({path,
                        apps::prepare_image(apps::read_gray_image(path, s.max_pixels), card.preprocess,
                                            static_cast<int>(card.height), static_cast<int>(card.width)),
                        -1});
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n",
                   std::string(e.what()).find(path) == 0 ? e.what() : (path + ": " + e.what()).c_str());
      ++failures;
    }
  }
  if (!s.idx_path.empty())
    for (Input& in : idx_inputs(s, card)) inputs.push_back(std::move(in));

  const auto classes = static_cast<std::size_t>(card.classes.size());
  const std::vector<std::string>& class_names = card.classes;  // (a structured binding; lambdas capture names)
  auto name_of = [&](int c) {
    return c >= 0 && static_cast<std::size_t>(c) < classes ? class_names[static_cast<std::size_t>(c)]
                                                           : std::to_string(c);
  };
  std::vector<apps::GridCell> cells;
  const std::vector<float> probs = inputs.empty() ? std::vector<float>{} : classify(*model, s, card, inputs, device);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const float* p = probs.data() + i * classes;
    std::vector<int> order(classes);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    order.resize(std::min<std::size_t>(3, classes));
    const Input& in = inputs[i];
    if (s.json) {
      nlohmann::json top = nlohmann::json::array();
      for (int c : order) top.push_back({{"prediction", c}, {"class", name_of(c)}, {"probability", p[c]}});
      nlohmann::json line = {{"file", in.name}, {"prediction", order[0]}, {"class", name_of(order[0])}, {"top3", top}};
      if (in.truth >= 0) line["label"] = in.truth, line["label_class"] = name_of(in.truth);
      std::printf("%s\n", line.dump().c_str());
    } else {
      std::string top;
      for (int c : order) {
        char probability[16];
        std::snprintf(probability, sizeof probability, "%.4f", static_cast<double>(p[c]));
        top += (top.empty() ? "" : ", ") + name_of(c) + " " + probability;
      }
      std::printf("%s: %s (%.4f)   top %zu: %s%s\n", in.name.c_str(), name_of(order[0]).c_str(), p[order[0]],
                  order.size(), top.c_str(), in.truth < 0 ? "" : ("   label: " + name_of(in.truth)).c_str());
    }
    cells.push_back({in.pixels, name_of(order[0]), in.truth >= 0 ? name_of(in.truth) : ""});
  }
  if (!s.grid_path.empty() && !cells.empty())
    apps::write_grid_png(s.grid_path, cells, static_cast<int>(card.height), static_cast<int>(card.width));
  return failures > 0 ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"mnist_predict: classify pictures (digits, clothing, ...) with a model trained by mnist_train"};
  app.add_option("--model", s.model_path, "the model (safetensors, from mnist_train --save or PyTorch)")->required();
  app.add_option("--device", s.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_flag("--json", s.json,
               "one JSON object per input: file, prediction (class number), class (name), top3, and label when known");
  app.add_option("--idx", s.idx_path, "classify samples of this IDX images file (true labels from its labels file)");
  app.add_option("--index", s.indices, "sample number in --idx (repeatable; default 0)");
  app.add_option("--count", s.count, "classify this many consecutive samples from each --index")->capture_default_str();
  app.add_option("--normalize", s.normalize,
                 "MEAN,STD: feed the model (pixel/255 - MEAN)/STD, whatever its file records (e.g. 0.1307,0.3081; "
                 "0,1 for pixel/255); the file's own keys: apps/common/model_card.h");
  app.add_option("--grid", s.grid_path, "write a PNG grid of the inputs with their predictions (mistakes in red)");
  app.add_option("--max-pixels", s.max_pixels,
                 "refuse an image whose header claims more pixels than this, before decoding it (default 4096×4096)")
      ->capture_default_str();
  app.add_option("images", s.images,
                 std::string("image files: ") + apps::kImageFormats + " (others, GIF among them, are refused)");
  return apps::run_cli(app, argc, argv, [&] { return predict(s); });
}
