// The IDX reader: round trips, raw and gzip, and every malformed file rejected with the file and
// the problem named.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/classification.h"
#include "data/classification_loaders.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& dims, std::size_t payload,
                                    std::uint8_t ndim_override = 0xff) {
  std::vector<std::uint8_t> b{0, 0, type,
                              ndim_override == 0xff ? static_cast<std::uint8_t>(dims.size()) : ndim_override};
  for (std::uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(d >> shift));
  const std::size_t header = b.size();
  b.resize(header + payload);
  for (std::size_t i = 0; i < payload; ++i) b[header + i] = static_cast<std::uint8_t>(i * 7);
  return b;
}

std::vector<std::uint8_t> gzip_bytes(const std::vector<std::uint8_t>& raw) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::vector<std::uint8_t> out(deflateBound(&z, raw.size()) + 64);
  z.next_in = const_cast<std::uint8_t*>(raw.data());
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

std::string error_of(const std::vector<std::uint8_t>& bytes) {
  return message_of<FormatError>([&] { data::parse_idx(bytes, "bad.idx"); });
}

}  // namespace

TEST_CASE("IDX written raw and gzip-compressed reads back equal") {
  const fs::path dir = ember::testing::process_dir("idx");
  std::vector<std::uint8_t> values(3 * 5 * 7);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::uint8_t>(i * 31 + 3);
  const Tensor t = from_vector(values, {3, 5, 7});
  for (bool gzip : {false, true}) {
    // The gzip one gets no ".gz" name: compression is detected by the magic bytes.
    const std::string path = (dir / (gzip ? "compressed-idx" : "raw-idx.gz")).string();
    data::write_idx(path, t, gzip);
    const Tensor back = data::read_idx(path);
    CHECK(back.shape() == Shape{3, 5, 7});
    CHECK(back.to_vector<std::uint8_t>() == values);
  }
  const std::vector<std::uint8_t> raw = idx_bytes(0x08, {4}, 4);
  const Tensor labels = data::parse_idx(raw, "labels");
  CHECK(labels.shape() == Shape{4});
  CHECK(data::parse_idx(gzip_bytes(raw), "labels.gz").to_vector<std::uint8_t>() == labels.to_vector<std::uint8_t>());
  // Concatenated gzip members are one stream, as gzip defines.
  std::vector<std::uint8_t> two = gzip_bytes({raw.begin(), raw.begin() + 6});
  const auto rest = gzip_bytes({raw.begin() + 6, raw.end()});
  two.insert(two.end(), rest.begin(), rest.end());
  CHECK(data::parse_idx(two, "members").to_vector<std::uint8_t>() == labels.to_vector<std::uint8_t>());
}

TEST_CASE("malformed IDX files are rejected with the problem named") {
  CHECK_THAT(message_of<IoError>([] { data::read_idx("/nonexistent/train-images-idx3-ubyte"); }),
             Contains("/nonexistent/train-images-idx3-ubyte: no such file"));
  CHECK_THAT(error_of({}), Contains("bad.idx: not a valid IDX file: the file is empty"));
  CHECK_THAT(error_of({0, 0}), Contains("too short for the 4-byte IDX magic number"));
  CHECK_THAT(error_of({'P', 'K', 3, 4, 0, 0, 0, 0}), Contains("wrong magic number"));
  CHECK_THAT(error_of(idx_bytes(0x0D, {2}, 8)), Contains("unsupported type code 0x0d (float)"));
  CHECK_THAT(error_of(idx_bytes(0x42, {2}, 2)), Contains("unknown type code 0x42"));
  CHECK_THAT(error_of(idx_bytes(0x08, {}, 0)), Contains("zero dimensions in the header"));
  CHECK_THAT(error_of(idx_bytes(0x08, {3, 0}, 0)), Contains("dimension 1 has size zero"));
  CHECK_THAT(error_of(idx_bytes(0x08, {2}, 0, 3)), Contains("the header is truncated"));
  CHECK_THAT(error_of(idx_bytes(0x08, {10, 28, 28}, 7839)), Contains("truncated payload"));
  CHECK_THAT(error_of(idx_bytes(0x08, {10}, 12)), Contains("2 trailing bytes after the 10-byte payload"));
  // 4,294,967,295 images of 28×28 in a 1 KB file: refused from the header, before allocating.
  CHECK_THAT(error_of(idx_bytes(0x08, {4294967295u, 28, 28}, 1000)),
             Contains("truncated payload: the header declares shape [4294967295, 28, 28], more than the 1000 bytes"));
  CHECK_THAT(error_of(gzip_bytes(idx_bytes(0x08, {4294967295u, 28, 28}, 1000))),
             Contains("the header declares more data (shape [4294967295, 28, 28]) than a"));
  // gzip: truncated compressed data, corrupt data, an inflated payload larger than declared.
  const auto good = gzip_bytes(idx_bytes(0x08, {100, 28}, 2800));
  CHECK_THAT(error_of({good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2)}),
             Contains("corrupt gzip stream"));
  auto corrupt = good;
  for (std::size_t i = 20; i < 40; ++i) corrupt[i] ^= 0x5a;
  CHECK_THAT(error_of(corrupt), Contains("corrupt gzip stream"));
  auto longer = idx_bytes(0x08, {100, 28}, 2801);
  CHECK_THAT(error_of(gzip_bytes(longer)), Contains("trailing bytes after the 2800-byte payload"));
  CHECK_THAT(error_of(gzip_bytes(idx_bytes(0x08, {100, 28}, 2799))), Contains("truncated payload"));
  auto garbage = good;
  garbage.push_back(0x42);
  garbage.push_back(0x42);
  CHECK_THAT(error_of(garbage), Contains("bytes after the end of the compressed data"));
}

TEST_CASE("IdxDataset finds files with or without .gz and checks counts") {
  const fs::path dir = ember::testing::process_dir("idx") / "mnist";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::uint8_t> images(6 * 4 * 4);
  for (std::size_t i = 0; i < images.size(); ++i) images[i] = static_cast<std::uint8_t>(i);
  data::write_idx((dir / "train-images-idx3-ubyte").string(), from_vector(images, {6, 4, 4}));
  data::write_idx((dir / "train-labels-idx1-ubyte.gz").string(), from_vector<std::uint8_t>({1, 2, 3, 4, 5, 9}, {6}),
                  true);
  const data::IdxDataset train(dir.string(), data::Split::train);
  CHECK(train.size() == 6);
  CHECK(train.sample_shape() == Shape{4, 4});
  CHECK(train.label(5) == 9);
  CHECK(train.max_label() == 9);
  std::vector<std::uint8_t> sample(16);
  train.copy_image(2, sample.data());
  CHECK(sample[0] == 32);

  const std::string missing = message_of<IoError>([&] { data::IdxDataset(dir.string(), data::Split::test); });
  CHECK_THAT(missing, Contains("the data folder " + dir.string() +
                               " has no t10k-images-idx3-ubyte (looked for "
                               "t10k-images-idx3-ubyte and t10k-images-idx3-ubyte.gz in it): get the four MNIST "
                               "files with scripts/fetch_mnist.sh " +
                               dir.string()));
  // A missing folder, and a file where the folder should be: one sentence naming it, then the fix.
  CHECK_THAT(message_of<IoError>([] { data::IdxDataset("/nonexistent/mnist", data::Split::train, "install X"); }),
             Contains("the data folder /nonexistent/mnist does not exist (looked for train-images-idx3-ubyte and "
                      "train-images-idx3-ubyte.gz in it): install X"));
  CHECK_THAT(message_of<IoError>([&] {
               data::IdxDataset((dir / "train-images-idx3-ubyte").string(), data::Split::train, "install X");
             }),
             Contains("train-images-idx3-ubyte is not a folder (looked for"));

  data::write_idx((dir / "train-labels-idx1-ubyte.gz").string(), from_vector<std::uint8_t>({1, 2, 3, 4, 5}, {5}), true);
  CHECK_THAT(message_of<FormatError>([&] { data::IdxDataset(dir.string(), data::Split::train); }),
             Contains("image/label count mismatch"));
  // Labels are not limited to MNIST's ten classes.
  data::write_idx((dir / "train-labels-idx1-ubyte.gz").string(), from_vector<std::uint8_t>({1, 2, 3, 4, 5, 12}, {6}),
                  true);
  CHECK(data::IdxDataset(dir.string(), data::Split::train).max_label() == 12);
}

namespace {

// Four IDX files: `train_labels` with images of train_h×train_w, `test_labels` with test_h×test_w.
fs::path write_dataset(const std::string& name, const std::vector<std::uint8_t>& train_labels,
                       const std::vector<std::uint8_t>& test_labels, std::int64_t test_side = 5) {
  const fs::path dir = ember::testing::process_dir("idx") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const char* prefix, const std::vector<std::uint8_t>& labels, std::int64_t side) {
    const auto n = static_cast<std::int64_t>(labels.size());
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n * side * side));
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i % 4 == 0 ? 255 : 0);
    data::write_idx((dir / (std::string(prefix) + "-images-idx3-ubyte")).string(),
                    from_vector(pixels, {n, side, side}));
    data::write_idx((dir / (std::string(prefix) + "-labels-idx1-ubyte")).string(), from_vector(labels, {n}));
  };
  write("train", train_labels, 5);
  write("t10k", test_labels, test_side);
  return dir;
}

}  // namespace

TEST_CASE("load_classification checks that the four files make one dataset") {
  const data::DatasetSpec& idx = data::dataset_spec("idx");
  const fs::path good = write_dataset("good", {0, 2, 1, 2}, {2, 0});
  const data::ClassificationData d = data::load_classification(good.string(), idx);
  CHECK(d.num_classes == 3);
  CHECK(d.class_names == std::vector<std::string>{"0", "1", "2"});
  CHECK(d.train->size() == 4);
  CHECK(d.test->size() == 2);
  // A quarter of the pixels are 255: mean 0.25, std sqrt(0.25 − 0.0625).
  CHECK(d.normalization.mean == Approx(0.25));
  CHECK(d.normalization.std == Approx(std::sqrt(0.1875)));
  CHECK(d.spec.preprocess == "plain");
  // The loaders' first line for a program, with the validation split or without.
  data::ClassificationLoaderOptions options;
  options.workers = 0;
  options.val_size = 1;
  const data::ClassificationLoaders split(d, Device::cpu(), options);
  CHECK(split.describe(d) ==
        "data: IDX images, 4 training images (3 for training, 1 for validation), 2 test images, "
        "3 classes, from " +
            good.string());
  options.val_size = 0;
  const data::ClassificationLoaders whole(d, Device::cpu(), options);
  CHECK_THAT(whole.describe(d), Contains("(4 for training, validation on the test set)"));

  // Names beside the files; their count must match, and none may be empty.
  std::ofstream(good / "classes.txt") << "cat\ndog\nbird\n\n";
  CHECK(data::load_classification(good.string(), idx).class_names == std::vector<std::string>{"cat", "dog", "bird"});
  std::ofstream(good / "classes.txt") << "cat\ndog\n";
  CHECK_THAT(message_of<FormatError>([&] { data::load_classification(good.string(), idx); }),
             Contains("classes.txt: names 2 classes, but the training labels in"));
  std::ofstream(good / "classes.txt") << "cat\n\nbird\n";
  CHECK_THAT(message_of<FormatError>([&] { data::load_classification(good.string(), idx); }),
             Contains("classes.txt: line 2 is empty"));

  // A test label beyond the training set's classes names the test labels file.
  const fs::path beyond = write_dataset("beyond", {0, 1, 1}, {1, 3});
  CHECK_THAT(message_of<FormatError>([&] { data::load_classification(beyond.string(), idx); }),
             Contains("t10k-labels-idx1-ubyte: label 3 at index 1 is not a class of the training set"));
  // Images of another size name the test images file.
  const fs::path sizes = write_dataset("sizes", {0, 1}, {1, 0}, 6);
  const std::string message = message_of<FormatError>([&] { data::load_classification(sizes.string(), idx); });
  CHECK_THAT(message, Contains("t10k-images-idx3-ubyte: its images are 6×6 pixels but those of"));
  CHECK_THAT(message, Contains("are 5×5"));
  // A known dataset's names must fit the labels.
  fs::remove(good / "classes.txt");
  CHECK_THAT(
      message_of<FormatError>([&] { data::load_classification(good.string(), data::dataset_spec("fashion-mnist")); }),
      Contains("Fashion-MNIST has 10 classes, but these labels go from 0 to 2"));
  // The known datasets and their conventions.
  CHECK(data::dataset_spec("fashion-mnist").class_names.at(9) == "Ankle boot");
  CHECK(data::dataset_spec("mnist").normalization.mean == 0.1307f);
  CHECK_THAT(message_of<ValueError>([] { data::dataset_spec("cifar"); }),
             Contains("unknown dataset 'cifar' (expected one of mnist, fashion-mnist, idx)"));
  // Where each is read from: the folder given, else (MNIST) $MNIST_DIR, else the default; idx has none.
  {
    testing::EnvScope unset("MNIST_DIR", nullptr);
    CHECK(data::data_folder("mnist", "") == "data/mnist");
    CHECK(data::data_folder("mnist", "here") == "here");
    CHECK(data::data_folder("fashion-mnist", "") == "/usr/share/datasets/fashion-mnist");
    CHECK(data::data_folder("idx", "").empty());
    CHECK(data::data_folder("cifar", "").empty());
  }
  testing::EnvScope set("MNIST_DIR", "/elsewhere");
  CHECK(data::data_folder("mnist", "") == "/elsewhere");
  CHECK(data::data_folder("fashion-mnist", "") == "/usr/share/datasets/fashion-mnist");
}

TEST_CASE("random_split and Subset") {
  std::vector<std::uint8_t> pixels(10 * 2);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i / 2);
  auto base = std::make_shared<data::TensorDataset>(from_vector(pixels, {10, 2}), arange(10, {.dtype = DType::i64}));
  const auto parts = data::random_split(base, {7, 3}, 42);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0]->size() == 7);
  CHECK(parts[1]->size() == 3);
  std::vector<std::size_t> all = parts[0]->indices();
  all.insert(all.end(), parts[1]->indices().begin(), parts[1]->indices().end());
  std::sort(all.begin(), all.end());
  for (std::size_t i = 0; i < 10; ++i) CHECK(all[i] == i);  // disjoint and complete
  CHECK(data::random_split(base, {7, 3}, 42)[0]->indices() == parts[0]->indices());
  std::uint8_t sample[2];
  parts[1]->copy_image(0, sample);
  CHECK(sample[0] == parts[1]->indices()[0]);
  CHECK(parts[1]->label(0) == static_cast<std::int32_t>(parts[1]->indices()[0]));
  CHECK_THROWS_AS(data::random_split(base, {7, 4}, 1), ValueError);
  CHECK_THROWS_AS(data::Subset(base, {10}), IndexError);
  const auto order = data::random_permutation(100, 5);
  CHECK(order == data::random_permutation(100, 5));
  CHECK(order != data::random_permutation(100, 6));
}
