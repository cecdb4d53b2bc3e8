// MNIST, subsets and random splits.
#include "data/dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "base/error.h"
#include "core/tensor/random.h"
#include "data/idx.h"

namespace ember::data {
namespace {

// The file for `stem` in `folder`, trying the plain and the ".gz" name. The error is one sentence:
// what is wrong with the folder (missing, not a folder, or without the file), both names looked
// for, then `how_to_get` with FOLDER replaced by the folder.
std::string find_file(const std::string& folder, const std::string& stem, const std::string& how_to_get) {
  namespace fs = std::filesystem;
  for (const std::string& candidate : {stem, stem + ".gz"}) {
    const fs::path p = fs::path(folder) / candidate;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  std::error_code ec;
  const std::string problem = fs::is_directory(folder, ec) ? "has no " + stem
                              : fs::exists(folder, ec)     ? "is not a folder"
                                                           : "does not exist";
  std::string fix = how_to_get;
  if (const std::size_t at = fix.find("FOLDER"); at != std::string::npos) fix.replace(at, 6, folder);
  throw IoError(detail::concat("the data folder ", folder, " ", problem, " (looked for ", stem, " and ", stem,
                               ".gz in it): ", fix));
}

}  // namespace

std::size_t Dataset::sample_numel() const { return static_cast<std::size_t>(numel_of(sample_shape())); }

IdxDataset::IdxDataset(const std::string& folder, Split split, const std::string& how_to_get) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  images_path_ = find_file(folder, prefix + "-images-idx3-ubyte", how_to_get);
  labels_path_ = find_file(folder, prefix + "-labels-idx1-ubyte", how_to_get);
  images_ = read_idx(images_path_);
  labels_ = read_idx(labels_path_);
  EMBER_CHECK(images_.dim() == 3, FormatError, images_path_,
              ": expected 3 dimensions (images, rows, columns), the "
              "header has ",
              images_.dim());
  EMBER_CHECK(labels_.dim() == 1, FormatError, labels_path_, ": expected 1 dimension (labels), the header has ",
              labels_.dim());
  EMBER_CHECK(images_.size(0) == labels_.size(0), FormatError, "image/label count mismatch: ", images_path_, " has ",
              images_.size(0), " images but ", labels_path_, " has ", labels_.size(0), " labels");
  EMBER_CHECK(images_.size(1) > 0 && images_.size(2) > 0, FormatError, images_path_, ": the images are ",
              images_.size(1), "×", images_.size(2), " pixels; both sides must be at least 1");
  const std::uint8_t* l = labels_.data<std::uint8_t>();
  for (std::int64_t i = 0; i < labels_.size(0); ++i) max_label_ = std::max<std::int32_t>(max_label_, l[i]);
  count_ = static_cast<std::size_t>(images_.size(0));
  rows_ = images_.size(1);
  cols_ = images_.size(2);
}

void IdxDataset::copy_image(std::size_t index, std::uint8_t* dst) const {
  const std::size_t n = static_cast<std::size_t>(rows_ * cols_);
  std::memcpy(dst, images_.data<std::uint8_t>() + index * n, n);
}

std::int32_t IdxDataset::label(std::size_t index) const { return labels_.data<std::uint8_t>()[index]; }

TensorDataset::TensorDataset(Tensor images, Tensor labels)
    : images_(images.cpu()), labels_(labels.cpu().to(DType::i32)) {
  EMBER_CHECK(images_.dtype() == DType::u8 && images_.dim() >= 1, DTypeError,
              "TensorDataset: images must be a u8 tensor [N, ...], got ", images_.dtype(), " of shape ",
              shape_str(images_.shape()));
  EMBER_CHECK(labels_.dim() == 1 && labels_.size(0) == images_.size(0), ShapeError, "TensorDataset: ", images_.size(0),
              " images but labels of shape ", shape_str(labels_.shape()));
}

Shape TensorDataset::sample_shape() const { return Shape(images_.shape().begin() + 1, images_.shape().end()); }

void TensorDataset::copy_image(std::size_t index, std::uint8_t* dst) const {
  const std::size_t n = sample_numel();
  std::memcpy(dst, images_.data<std::uint8_t>() + index * n, n);
}

std::int32_t TensorDataset::label(std::size_t index) const { return labels_.data<std::int32_t>()[index]; }

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<std::size_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  EMBER_CHECK(base_ != nullptr, ValueError, "Subset: the base dataset is null");
  for (std::size_t i : indices_)
    EMBER_CHECK(i < base_->size(), IndexError, "Subset: index ", i, " is out of range for a dataset of ", base_->size(),
                " samples");
}

void Subset::copy_image(std::size_t index, std::uint8_t* dst) const { base_->copy_image(indices_[index], dst); }
std::int32_t Subset::label(std::size_t index) const { return base_->label(indices_[index]); }

std::vector<std::size_t> random_permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  Generator g(seed);
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[static_cast<std::size_t>(g.below(i))]);
  return order;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<std::size_t>& sizes, std::uint64_t seed) {
  const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
  EMBER_CHECK(total == dataset->size(), ValueError, "random_split: the sizes add up to ", total,
              " but the dataset has ", dataset->size(), " samples");
  const std::vector<std::size_t> order = random_permutation(total, seed);
  std::vector<std::shared_ptr<Subset>> parts;
  std::size_t at = 0;
  for (std::size_t n : sizes) {
    parts.push_back(std::make_shared<Subset>(
        dataset, std::vector<std::size_t>(order.begin() + static_cast<std::ptrdiff_t>(at),
                                          order.begin() + static_cast<std::ptrdiff_t>(at + n))));
    at += n;
  }
  return parts;
}

}  // namespace ember::data
