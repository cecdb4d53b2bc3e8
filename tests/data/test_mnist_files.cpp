// The MNIST files: counts, the first label, the label histogram and the first image's pixel sum,
// each checked against a value computed independently here (zlib's gzread on the raw files, with
// or without .gz), and against the published figures of the official set or of its
// 10,000-image prefix. The folder is $MNIST_DIR, else the build's EMBER_MNIST_DIR. Its own
// CTest entry; exits 77 (skipped) with the reason where the folder is absent.
#define CATCH_CONFIG_RUNNER
#include <zlib.h>
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "data/dataset.h"

using namespace ember;

namespace {
std::string g_folder;

// The file, compressed or not (gzread passes an uncompressed file through).
std::vector<std::uint8_t> gunzip(std::string path) {
  if (!std::filesystem::exists(path)) path = path.substr(0, path.size() - 3);
  gzFile f = gzopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::vector<std::uint8_t> out;
  std::array<std::uint8_t, 65536> chunk;
  int n;
  while ((n = gzread(f, chunk.data(), chunk.size())) > 0) out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  gzclose(f);
  return out;
}
}  // namespace

TEST_CASE("the MNIST training and test files read as expected") {
  const data::MnistDataset train(g_folder, data::Split::train);
  const data::MnistDataset test(g_folder, data::Split::test);
  const auto raw_labels = gunzip(g_folder + "/train-labels-idx1-ubyte.gz");
  const auto raw_images = gunzip(g_folder + "/train-images-idx3-ubyte.gz");
  // Counts from the headers, never assumed: the official training file or its 10,000-image prefix.
  CHECK(train.size() == raw_labels.size() - 8);
  CHECK(train.size() == (raw_images.size() - 16) / 784);
  REQUIRE((train.size() == 10000 || train.size() == 60000));
  CHECK(test.size() == 10000);
  CHECK(train.sample_shape() == Shape{28, 28});
  CHECK(train.label(0) == 5);
  std::array<int, 10> histogram{}, independent{};
  for (std::size_t i = 0; i < train.size(); ++i) histogram[static_cast<std::size_t>(train.label(i))]++;
  for (std::size_t i = 8; i < raw_labels.size(); ++i) independent[raw_labels[i]]++;
  CHECK(histogram == independent);
  if (train.size() == 10000)
    CHECK(histogram == std::array<int, 10>{1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978});
  else
    CHECK(histogram == std::array<int, 10>{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949});
  std::vector<std::uint8_t> first(784);
  train.copy_image(0, first.data());
  long long sum = 0, independent_sum = 0;
  for (std::uint8_t p : first) sum += p;
  for (std::size_t i = 16; i < 16 + 784; ++i) independent_sum += raw_images[i];
  CHECK(sum == independent_sum);
  CHECK(sum == 27525);
}

int main(int argc, char** argv) {
  const char* env = std::getenv("MNIST_DIR");
  g_folder = env && *env ? env : EMBER_MNIST_DIR;
  if (!std::filesystem::exists(g_folder + "/train-labels-idx1-ubyte.gz") &&
      !std::filesystem::exists(g_folder + "/train-labels-idx1-ubyte")) {
    std::printf("test_mnist_files: skipped: no MNIST files in %s (scripts/fetch_mnist.sh fills it, or set MNIST_DIR)\n",
                g_folder.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
