// The known datasets and the checks that make four IDX files one dataset.
#include "data/classification.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/error.h"

namespace ember::data {
namespace {

std::vector<DatasetSpec> make_specs() {
  DatasetSpec mnist{.name = "mnist",
                    .title = "MNIST",
                    .class_names = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"},
                    .has_normalization = true,
                    .normalization = {0.1307f, 0.3081f},  // the tutorials' figures
                    .preprocess = "digit",
                    .default_folder = "data/mnist",
                    .how_to_get = IdxDataset::kMnistHowToGet};
  // Zalando's labels, in order (the dataset's README); mean and std of the 60,000 training images.
  DatasetSpec fashion{.name = "fashion-mnist",
                      .title = "Fashion-MNIST",
                      .class_names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                                      "Sneaker", "Bag", "Ankle boot"},
                      .has_normalization = true,
                      .normalization = {0.2860f, 0.3530f},
                      .preprocess = "article",
                      .default_folder = "/usr/share/datasets/fashion-mnist",
                      .how_to_get =
                          "install Debian's package dataset-fashion-mnist (scripts/train_mnist.sh --dataset "
                          "fashion-mnist does it), or point --data at a folder with the four Fashion-MNIST "
                          "files"};
  DatasetSpec idx{.name = "idx",
                  .title = "IDX images",
                  .class_names = {},
                  .has_normalization = false,
                  .normalization = {},
                  .preprocess = "plain",
                  .default_folder = "",
                  .how_to_get =
                      "give --data a folder with train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                      "t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (optionally .gz)"};
  return {mnist, fashion, idx};
}

const std::vector<DatasetSpec>& specs() {
  static const std::vector<DatasetSpec> all = make_specs();
  return all;
}

std::string shape_text(const Shape& s) { return detail::concat(s[0], "×", s[1]); }

// classes.txt: one name per line; trailing blank lines and a final newline are ignored.
std::vector<std::string> read_class_file(const std::string& path) {
  std::ifstream in(path);
  EMBER_CHECK(in.good(), IoError, path, ": cannot open for reading");
  std::vector<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    names.push_back(line);
  }
  while (!names.empty() && names.back().empty()) names.pop_back();
  for (std::size_t i = 0; i < names.size(); ++i)
    EMBER_CHECK(!names[i].empty(), FormatError, path, ": line ", i + 1,
                " is empty; every class needs a name, one per line");
  return names;
}

}  // namespace

const DatasetSpec& dataset_spec(const std::string& name) {
  for (const DatasetSpec& s : specs())
    if (s.name == name) return s;
  std::string known;
  for (const DatasetSpec& s : specs()) known += (known.empty() ? "" : ", ") + s.name;
  throw ValueError(detail::concat("unknown dataset '", name, "' (expected one of ", known, ")"));
}

std::string data_folder(const std::string& dataset, const std::string& given) {
  if (!given.empty()) return given;
  const char* env = std::getenv("MNIST_DIR");
  if (dataset == "mnist" && env && *env) return env;
  for (const std::string& name : dataset_names())
    if (name == dataset) return dataset_spec(name).default_folder;
  return {};
}

std::vector<std::string> dataset_names() {
  std::vector<std::string> names;
  for (const DatasetSpec& s : specs()) names.push_back(s.name);
  return names;
}

Normalization pixel_statistics(const IdxDataset& dataset) {
  const Tensor& images = dataset.images();
  const std::uint8_t* p = images.data<std::uint8_t>();
  const std::size_t n = static_cast<std::size_t>(images.numel());
  if (n == 0) return {};
  // Exact integer sums (at most 255²·n, far below 2⁶⁴ for any file IDX can describe).
  std::uint64_t sum = 0, sum_sq = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sum += p[i];
    sum_sq += static_cast<std::uint64_t>(p[i]) * p[i];
  }
  const double mean = static_cast<double>(sum) / static_cast<double>(n) / 255.0;
  const double var = static_cast<double>(sum_sq) / static_cast<double>(n) / (255.0 * 255.0) - mean * mean;
  const double std = std::sqrt(std::max(var, 0.0));
  return {static_cast<float>(mean), static_cast<float>(std > 0 ? std : 1.0)};
}

ClassificationData load_classification(const std::string& folder, const DatasetSpec& spec) {
  ClassificationData data;
  data.spec = spec;
  data.folder = folder;
  data.train = std::make_shared<IdxDataset>(folder, Split::train, spec.how_to_get);
  data.test = std::make_shared<IdxDataset>(folder, Split::test, spec.how_to_get);
  const IdxDataset &train = *data.train, &test = *data.test;
  EMBER_CHECK(train.size() > 0, FormatError, train.images_path(), ": holds no images");
  EMBER_CHECK(test.sample_shape() == train.sample_shape(), FormatError, test.images_path(), ": its images are ",
              shape_text(test.sample_shape()), " pixels but those of ", train.images_path(), " are ",
              shape_text(train.sample_shape()), "; the four files must come from one dataset");
  data.num_classes = train.max_label() + 1;
  const std::uint8_t* labels = test.labels().data<std::uint8_t>();
  for (std::int64_t i = 0; i < test.labels().numel(); ++i)
    EMBER_CHECK(labels[i] < data.num_classes, FormatError, test.labels_path(), ": label ", int(labels[i]), " at index ",
                i, " is not a class of the training set (its labels in ", train.labels_path(), " go from 0 to ",
                data.num_classes - 1, ")");

  const std::string class_file = (std::filesystem::path(folder) / "classes.txt").string();
  std::error_code ec;
  if (std::filesystem::is_regular_file(class_file, ec)) {
    data.class_names = read_class_file(class_file);
    EMBER_CHECK(static_cast<std::int64_t>(data.class_names.size()) == data.num_classes, FormatError, class_file,
                ": names ", data.class_names.size(), " classes, but the training labels in ", train.labels_path(),
                " have ", data.num_classes, " (0 to ", data.num_classes - 1, "); give one name per line");
  } else if (!spec.class_names.empty()) {
    EMBER_CHECK(static_cast<std::int64_t>(spec.class_names.size()) == data.num_classes, FormatError,
                train.labels_path(), ": ", spec.title, " has ", spec.class_names.size(),
                " classes, but these labels go from 0 to ", data.num_classes - 1,
                "; is --data the right folder? For another dataset use --dataset idx (and name its classes in ",
                class_file, ")");
    data.class_names = spec.class_names;
  } else {
    for (std::int64_t c = 0; c < data.num_classes; ++c) data.class_names.push_back(std::to_string(c));
  }
  data.normalization = spec.has_normalization ? spec.normalization : pixel_statistics(train);
  return data;
}

}  // namespace ember::data
