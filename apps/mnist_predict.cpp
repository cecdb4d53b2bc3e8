// mnist_predict: classifies handwritten digits — image files (PNG, JPEG, BMP, PGM), prepared the
// way MNIST was made, or samples of an IDX file — with a model trained by mnist_train (or
// exported from PyTorch), on any device, and prints the three likeliest digits.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/common/digits.h"
#include "apps/common/program.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/serialize.h"
#include "data/idx.h"
#include "layers/models.h"

using namespace ember;
using apps::UsageError;

namespace {

struct Settings {
  std::string model_path, device = "auto", idx_path, grid_path;
  std::vector<long long> indices;
  long long count = 1;
  bool json = false;
  std::vector<std::string> images;
};

struct Input {
  std::string name;  // file, or "FILE[N]" for an IDX sample
  std::array<std::uint8_t, 784> pixels;
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

int predict(const Settings& s) {
  if (s.images.empty() && s.idx_path.empty())
    throw UsageError("nothing to classify: give image files, or --idx FILE --index N");
  if (!s.indices.empty() && s.idx_path.empty()) throw UsageError("--index needs --idx FILE");
  if (s.count < 1) throw UsageError("--count must be positive");
  Device device;
  try {
    device = s.device == "auto" ? Device::best() : Device::parse(s.device);
    require_usable(device);
  } catch (const Error& e) {
    throw UsageError("--device " + s.device + ": " + e.what());
  }

  // The model: its architecture (an MLP or the CNN) from the checkpoint's shapes, its inputs'
  // scaling from the metadata.
  Checkpoint checkpoint;
  std::shared_ptr<nn::Sequential> model;
  bool is_cnn = false;
  try {
    checkpoint = load_safetensors(s.model_path, Device::cpu());
    is_cnn = find_tensor(checkpoint.tensors, "0.weight") && find_tensor(checkpoint.tensors, "0.weight")->dim() == 4;
    if (is_cnn) {
      const nn::CnnShape c = nn::cnn_shape_of(checkpoint.tensors, s.model_path);
      model = nn::cnn(c.c1, c.c2, c.hidden);
    } else {
      const nn::MlpShape shape = nn::mlp_shape_of(checkpoint.tensors, s.model_path);
      if (shape.in_features != 784 || shape.out_features != 10)
        throw UsageError("--model " + s.model_path + ": the model maps " + std::to_string(shape.in_features) +
                         " inputs to " + std::to_string(shape.out_features) + " outputs, not 784 to 10");
      model = nn::mlp(784, shape.hidden, 10);
    }
  } catch (const Error& e) {
    throw UsageError(std::string("--model ") + e.what());
  }
  StateDict weights;
  for (auto& [name, t] : checkpoint.tensors)
    if (name.rfind("optimizer.", 0) != 0) weights.emplace_back(name, t);
  model->load_state_dict(weights);
  model->to(device);
  model->eval();
  const bool normalize = checkpoint.metadata.count("normalize") && checkpoint.metadata.at("normalize") == "1";

  // The inputs; a file that cannot be read or holds no digit is reported and skipped.
  std::vector<Input> inputs;
  int failures = 0;
  for (const std::string& path : s.images) {
    try {
      inputs.push_back({path, apps::to_mnist_digit(apps::read_gray_image(path)), -1});
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", std::string(e.what()).find(path) == 0 ? e.what() : (path + ": " + e.what()).c_str());
      ++failures;
    }
  }
  if (!s.idx_path.empty()) {
    Tensor images;
    try {
      images = data::read_idx(s.idx_path);
    } catch (const Error& e) {
      throw UsageError(std::string("--idx ") + e.what());
    }
    if (images.dim() != 3 || images.size(1) != 28 || images.size(2) != 28)
      throw UsageError("--idx " + s.idx_path + ": expected 28×28 images, the file has shape " + shape_str(images.shape()));
    Tensor labels;
    if (const std::string lp = labels_path_for(s.idx_path); !lp.empty()) labels = data::read_idx(lp);
    std::vector<long long> wanted;
    for (long long first : s.indices.empty() ? std::vector<long long>{0} : s.indices)
      for (long long k = 0; k < s.count; ++k) wanted.push_back(first + k);
    for (long long i : wanted) {
      if (i < 0 || i >= images.size(0))
        throw UsageError("--index " + std::to_string(i) + ": out of range, " + s.idx_path + " has " +
                         std::to_string(images.size(0)) + " images");
      Input in{s.idx_path + "[" + std::to_string(i) + "]", {}, -1};
      std::copy_n(images.data<std::uint8_t>() + i * 784, 784, in.pixels.begin());
      if (labels.defined() && i < labels.size(0)) in.truth = labels.data<std::uint8_t>()[i];
      inputs.push_back(in);
    }
  }

  std::vector<apps::GridCell> cells;
  if (!inputs.empty()) {
    std::vector<std::uint8_t> batch;
    for (const Input& in : inputs) batch.insert(batch.end(), in.pixels.begin(), in.pixels.end());
    NoGradGuard no_grad;
    const Shape shape = is_cnn ? Shape{static_cast<std::int64_t>(inputs.size()), 1, 28, 28}
                               : Shape{static_cast<std::int64_t>(inputs.size()), 784};
    const Tensor x = normalize_u8(from_vector(batch, shape).to(device),
                                  normalize ? 0.1307f : 0.0f, normalize ? 0.3081f : 1.0f);
    const std::vector<float> probs = softmax((*model)(x)).to_vector<float>();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      std::array<int, 10> order{};
      for (int d = 0; d < 10; ++d) order[static_cast<std::size_t>(d)] = d;
      const float* p = probs.data() + i * 10;
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
      if (s.json) {
        nlohmann::json top3 = nlohmann::json::array();
        for (int k = 0; k < 3; ++k) top3.push_back({{"digit", order[static_cast<std::size_t>(k)]}, {"probability", p[order[static_cast<std::size_t>(k)]]}});
        nlohmann::json line = {{"file", inputs[i].name}, {"prediction", order[0]}, {"top3", top3}};
        if (inputs[i].truth >= 0) line["label"] = inputs[i].truth;
        std::printf("%s\n", line.dump().c_str());
      } else {
        std::printf("%s: %d (%.4f)   top 3: %d %.4f, %d %.4f, %d %.4f%s\n", inputs[i].name.c_str(), order[0],
                    p[order[0]], order[0], p[order[0]], order[1], p[order[1]], order[2], p[order[2]],
                    inputs[i].truth < 0 ? "" : ("   label: " + std::to_string(inputs[i].truth)).c_str());
      }
      cells.push_back({inputs[i].pixels, order[0], inputs[i].truth});
    }
  }
  if (!s.grid_path.empty() && !cells.empty()) apps::write_grid_png(s.grid_path, cells);
  return failures > 0 ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"mnist_predict: classify handwritten digits with a model trained by mnist_train"};
  app.add_option("--model", s.model_path, "the model (safetensors, from mnist_train --save or PyTorch)")->required();
  app.add_option("--device", s.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_flag("--json", s.json, "one JSON object per input: file, prediction, top3");
  app.add_option("--idx", s.idx_path, "classify samples of this IDX images file (true labels from its labels file)");
  app.add_option("--index", s.indices, "sample number in --idx (repeatable; default 0)");
  app.add_option("--count", s.count, "classify this many consecutive samples from each --index")->capture_default_str();
  app.add_option("--grid", s.grid_path, "write a PNG grid of the inputs with their predictions (mistakes in red)");
  app.add_option("images", s.images, "image files: PNG, JPEG, BMP or PGM");
  return apps::run_cli(app, argc, argv, [&] { return predict(s); });
}
