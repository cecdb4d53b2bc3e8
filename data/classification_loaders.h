// The three streams of batches a classifier is trained with, on one device: training (shuffled,
// a data-parallel rank's share padded to equal), validation (split off the training images, or
// the test set) and test (each image once, over all ranks). On a GPU batches travel as u8 from
// pinned staging and are normalized there; on the CPU the loader's workers normalize them, so the
// training thread only trains.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/classification.h"
#include "data/loader.h"
#include "data/preloaded.h"

namespace ember::data {

struct ClassificationLoaderOptions {
  std::size_t batch_size = 128, eval_batch_size = 256;
  std::size_t workers = 2;   // loader threads (0: on the caller's thread)
  std::size_t val_size = 0;  // training images split off for validation (seeded); 0: the test set
  bool shuffle = true;
  std::uint64_t seed = 0;           // of the split and the order
  bool flatten = true;              // images [B, H·W] (an MLP); false: [B, 1, H, W] (a CNN)
  Normalization normalization;      // the default: pixel/255
  bool preload = false;             // training images kept on the device, each batch gathered there
  std::size_t rank = 0, ranks = 1;  // this process's share (data::Shard)
  Augmentation augment = {};        // of the training images only; not with preload
};

class ClassificationLoaders {
 public:
  // ValueError when val_size leaves no training images.
  ClassificationLoaders(const ClassificationData& data, Device device, const ClassificationLoaderOptions& options);

  BatchSource& train() { return preloaded_ ? static_cast<BatchSource&>(*preloaded_) : *train_batches_; }
  BatchSource& validation() { return *val_batches_; }
  BatchSource& test() { return *test_batches_; }
  const DataLoader& train_order() const { return *train_loader_; }  // batches and samples per epoch
  const std::shared_ptr<const Dataset>& train_set() const { return train_set_; }
  const std::shared_ptr<const Dataset>& validation_set() const { return val_set_; }
  const PreloadedLoader* preloaded() const { return preloaded_ ? &*preloaded_ : nullptr; }
  // For a program's first lines: "data: MNIST, 10000 training images (8334 for training, 1666 for
  // validation), 10000 test images, 10 classes, from data/mnist", and a line for the preloaded.
  std::string describe(const ClassificationData& data) const;

 private:
  Device device_;
  std::shared_ptr<const Dataset> train_set_, val_set_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_, test_loader_;
  std::unique_ptr<DeviceLoader> train_batches_, val_batches_, test_batches_;
  std::optional<PreloadedLoader> preloaded_;
};

}  // namespace ember::data
