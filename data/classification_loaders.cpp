// The loaders of a classification run.
#include "data/classification_loaders.h"

#include <iomanip>

#include "base/error.h"

namespace ember::data {

ClassificationLoaders::ClassificationLoaders(const ClassificationData& data, Device device,
                                             const ClassificationLoaderOptions& options)
    : device_(device) {
  const std::size_t n_all = data.train->size();
  EMBER_CHECK(options.val_size < n_all, ValueError, "a validation split of ", options.val_size,
              " images must be smaller than the ", n_all, " training images");
  train_set_ = data.train;
  val_set_ = data.test;
  if (options.val_size > 0) {
    const auto parts = random_split(data.train, {n_all - options.val_size, options.val_size}, options.seed);
    train_set_ = parts[0];
    val_set_ = parts[1];
  }
  EMBER_CHECK(!(options.preload && options.augment.any()), ValueError,
              "preloaded training images are gathered on the device as they are; augmentation (",
              options.augment.describe(), ") runs in the loader's workers: leave out one of the two");
  const bool pinned = device.is_cuda();
  const std::optional<Normalization> host_norm =
      device.is_cpu() ? std::optional<Normalization>(options.normalization) : std::nullopt;
  auto loader = [&](std::shared_ptr<const Dataset> set, bool training) {
    return std::make_unique<DataLoader>(
        set, LoaderOptions{.batch_size = training ? options.batch_size : options.eval_batch_size,
                           .shuffle = training && options.shuffle,
                           .seed = options.seed,
                           .num_workers = options.workers,
                           .pin_memory = pinned,
                           .flatten = options.flatten,
                           .normalize = host_norm,
                           .shard = {options.rank, options.ranks, training},
                           .augment = training ? options.augment : Augmentation{}});
  };
  train_loader_ = loader(train_set_, true);
  val_loader_ = loader(val_set_, false);
  test_loader_ = loader(data.test, false);
  train_batches_ = std::make_unique<DeviceLoader>(*train_loader_, device, options.normalization);
  val_batches_ = std::make_unique<DeviceLoader>(*val_loader_, device, options.normalization);
  test_batches_ = std::make_unique<DeviceLoader>(*test_loader_, device, options.normalization);
  // Preloaded: the same batches in the same order as streaming them, the baseline the streamed
  // pipeline is held to.
  if (options.preload) preloaded_.emplace(*train_loader_, device, options.normalization);
}

std::string ClassificationLoaders::describe(const ClassificationData& data) const {
  const bool split = val_set_ != data.test;
  std::string text = detail::concat(
      "data: ", data.spec.title, ", ", data.train->size(), " training images (", train_set_->size(), " for training, ",
      split ? detail::concat(val_set_->size(), " for validation") : std::string("validation on the test set"), "), ",
      data.test->size(), " test images, ", data.num_classes, " classes, from ", data.folder);
  if (train_loader_->options().augment.any())
    text += "\ndata: training images augmented: " + train_loader_->options().augment.describe();
  if (preloaded_)
    text += detail::concat("\ndata: training images preloaded on ", device_.str(), " (", std::fixed,
                           std::setprecision(1), static_cast<double>(preloaded_->bytes_on_device()) / 1e6, " MB)");
  return text;
}

}  // namespace ember::data
