// mnist_predict on real image files: 100 test samples written as PNG — as they are, scaled up 3×,
// shifted off-centre on a larger canvas, and inverted (dark on light, as ink on paper or an
// article photographed on white) — must get the model's predictions on the same IDX samples for
// at least 97 of 100 in every variant, which holds only if the photos are prepared the way the
// dataset was made (MNIST's digits and Fashion-MNIST's articles differently). Trains its model
// first with mnist_train. Exits 77 (skipped) where the dataset's files are absent.
//   predict_variants MNIST_TRAIN MNIST_PREDICT DATASET DATA_DIR WORK_DIR
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

#include "data/idx.h"

namespace fs = std::filesystem;

namespace {

int run(const std::string& command) {
  std::printf("$ %s\n", command.c_str());
  std::fflush(stdout);
  return std::system(command.c_str());
}

// Predictions by input name from mnist_predict --json output.
std::map<std::string, int> read_predictions(const std::string& path) {
  std::map<std::string, int> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) {
      const auto j = nlohmann::json::parse(line);
      out[j.at("file").get<std::string>()] = j.at("prediction").get<int>();
    }
  return out;
}

void write_png(const fs::path& path, int w, int h, const std::vector<std::uint8_t>& gray) {
  if (!stbi_write_png(path.c_str(), w, h, 1, gray.data(), w)) {
    std::fprintf(stderr, "could not write %s\n", path.c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: predict_variants MNIST_TRAIN MNIST_PREDICT DATASET DATA_DIR WORK_DIR\n");
    return 2;
  }
  const std::string train = argv[1], predict = argv[2], dataset = argv[3], mnist = argv[4];
  const fs::path work = argv[5];
  if (!fs::exists(fs::path(mnist) / "t10k-images-idx3-ubyte.gz")) {
    std::printf("predict_variants: skipped: no %s files in %s\n", dataset.c_str(), mnist.c_str());
    return 77;
  }
  fs::remove_all(work);
  fs::create_directories(work);
  const std::string model = (work / "model.safetensors").string();
  if (run(train + " --dataset " + dataset + " --data " + mnist +
          " --epochs 3 --lr 0.1 --val-size 0 --workers 0 --save " + model + " > " + (work / "train.log").string()) != 0)
    return 1;
  const std::string idx = mnist + "/t10k-images-idx3-ubyte.gz";
  if (run(predict + " --model " + model + " --idx " + idx + " --index 0 --count 100 --json > " +
          (work / "idx.jsonl").string()) != 0)
    return 1;
  const auto reference = read_predictions((work / "idx.jsonl").string());
  const ember::Tensor images = ember::data::read_idx(idx);
  const std::uint8_t* pixels = images.data<std::uint8_t>();

  const std::vector<std::string> variants{"plain", "scaled3x", "shifted", "inverted"};
  bool ok = true;
  for (const std::string& variant : variants) {
    const fs::path dir = work / variant;
    fs::create_directories(dir);
    std::string files;
    for (int i = 0; i < 100; ++i) {
      const std::uint8_t* digit = pixels + i * 784;
      std::vector<std::uint8_t> out;
      int w = 28, h = 28;
      if (variant == "plain") {
        out.assign(digit, digit + 784);
      } else if (variant == "scaled3x") {  // nearest-neighbour enlargement: a bigger, blockier digit
        w = h = 84;
        out.resize(84 * 84);
        for (int y = 0; y < 84; ++y)
          for (int x = 0; x < 84; ++x) out[static_cast<std::size_t>(y * 84 + x)] = digit[(y / 3) * 28 + x / 3];
      } else if (variant == "shifted") {  // on a larger canvas, far from the centre
        w = 60;
        h = 50;
        out.assign(static_cast<std::size_t>(w * h), 0);
        const int dx = 3 + i % 25, dy = 20 - i % 18;
        for (int y = 0; y < 28; ++y)
          for (int x = 0; x < 28; ++x) out[static_cast<std::size_t>((y + dy) * w + x + dx)] = digit[y * 28 + x];
      } else {  // dark on light: ink on paper, or an article photographed on white, larger
        w = h = 56;
        out.resize(56 * 56);
        for (int y = 0; y < 56; ++y)
          for (int x = 0; x < 56; ++x)
            out[static_cast<std::size_t>(y * 56 + x)] = static_cast<std::uint8_t>(255 - digit[(y / 2) * 28 + x / 2]);
      }
      const fs::path file = dir / ("digit" + std::to_string(i) + ".png");
      write_png(file, w, h, out);
      files += " " + file.string();
    }
    const fs::path result = work / (variant + ".jsonl");
    if (run(predict + " --model " + model + " --json" + files + " > " + result.string()) != 0) return 1;
    const auto got = read_predictions(result.string());
    int agree = 0;
    for (int i = 0; i < 100; ++i) {
      const std::string file = (dir / ("digit" + std::to_string(i) + ".png")).string();
      const std::string ref = idx + "[" + std::to_string(i) + "]";
      if (got.count(file) && reference.count(ref) && got.at(file) == reference.at(ref)) ++agree;
    }
    std::printf("%-9s %d/100 agree with the predictions on the IDX samples\n", variant.c_str(), agree);
    ok = ok && agree >= 97;
  }
  std::printf("predict_variants: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
