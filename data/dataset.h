// Datasets of images with integer labels: IDX files such as MNIST and Fashion-MNIST, subsets,
// and the tutorials' random train/validation split.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace ember::data {

// A read-only collection of samples: an image of `sample_numel()` u8 pixels and an i32 label.
// Samples are copied out by index, so a loader can gather a batch straight into its buffers.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::size_t size() const = 0;
  virtual Shape sample_shape() const = 0;  // e.g. [28, 28]
  std::size_t sample_numel() const;
  virtual void copy_image(std::size_t index, std::uint8_t* dst) const = 0;
  virtual std::int32_t label(std::size_t index) const = 0;
};

enum class Split { train, test };

// Pixel scaling: x = (pixel/255 − mean)/std. The defaults give the tutorial's ToTensor() scaling
// to [0, 1].
struct Normalization {
  float mean = 0.0f;
  float std = 1.0f;
};

// One split of an image dataset in MNIST's layout: a folder holding
// train-images-idx3-ubyte / train-labels-idx1-ubyte (or t10k-...), each raw or gzip-compressed,
// with or without a ".gz" name. MNIST, Fashion-MNIST and any other set of such files: images of
// any size, labels 0..255; counts and sizes come from the files. Errors: a missing folder or file
// names the folder and what was looked for, followed by `how_to_get` (a clause that says how to get
// the files; FOLDER in it stands for the folder); an image/label count mismatch names both files.
class IdxDataset : public Dataset {
 public:
  IdxDataset(const std::string& folder, Split split, const std::string& how_to_get = kMnistHowToGet);
  std::size_t size() const override { return count_; }
  Shape sample_shape() const override { return {rows_, cols_}; }
  void copy_image(std::size_t index, std::uint8_t* dst) const override;
  std::int32_t label(std::size_t index) const override;
  const Tensor& images() const { return images_; }  // u8 [N, rows, cols]
  const Tensor& labels() const { return labels_; }  // u8 [N]
  const std::string& images_path() const { return images_path_; }
  const std::string& labels_path() const { return labels_path_; }
  std::int32_t max_label() const { return max_label_; }  // -1 for an empty split

  static constexpr const char* kMnistHowToGet =
      "get the four MNIST files with scripts/fetch_mnist.sh FOLDER (or --from a local copy), or point --data or "
      "$MNIST_DIR at a folder that has them";

 private:
  Tensor images_, labels_;
  std::size_t count_ = 0;
  std::int64_t rows_ = 0, cols_ = 0;
  std::int32_t max_label_ = -1;
  std::string images_path_, labels_path_;
};

// The name the MNIST tutorials use; the files are the same format.
using MnistDataset = IdxDataset;

// Samples held in memory: images u8 [N, ...] and labels [N] (u8, i32 or i64), on the CPU.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor images, Tensor labels);
  std::size_t size() const override { return static_cast<std::size_t>(images_.size(0)); }
  Shape sample_shape() const override;
  void copy_image(std::size_t index, std::uint8_t* dst) const override;
  std::int32_t label(std::size_t index) const override;

 private:
  Tensor images_, labels_;
};

// The samples of `base` at `indices`, in that order.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<std::size_t> indices);
  std::size_t size() const override { return indices_.size(); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  void copy_image(std::size_t index, std::uint8_t* dst) const override;
  std::int32_t label(std::size_t index) const override;
  const std::vector<std::size_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<std::size_t> indices_;
};

// Splits `dataset` into disjoint random subsets of the given sizes (which must add up to its
// size), from one permutation drawn with `seed` — e.g. {50000, 10000} for the tutorial's split.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<std::size_t>& sizes, std::uint64_t seed);

// A permutation of 0..n-1 drawn with `seed` (Fisher–Yates over ember's Generator).
std::vector<std::size_t> random_permutation(std::size_t n, std::uint64_t seed);

}  // namespace ember::data
