// PreloadedLoader: one copy of the dataset to the device, then a gather per batch.
#include "data/preloaded.h"

#include "base/error.h"
#include "core/ops/ops.h"

namespace ember::data {

PreloadedLoader::PreloadedLoader(const DataLoader& order, Device device, Normalization normalization)
    : order_(order), device_(device), norm_(normalization) {
  const Dataset& data = order.dataset();
  const std::size_t n = data.size();
  const Shape sample = data.sample_shape();
  const auto pixels = static_cast<std::size_t>(numel_of(sample));
  Tensor images = empty({static_cast<std::int64_t>(n), static_cast<std::int64_t>(pixels)}, {.dtype = DType::u8});
  Tensor labels = empty({static_cast<std::int64_t>(n)}, {.dtype = DType::i32});
  auto* image_bytes = images.data<std::uint8_t>();
  auto* label_values = labels.data<std::int32_t>();
  for (std::size_t i = 0; i < n; ++i) {
    data.copy_image(i, image_bytes + i * pixels);
    label_values[i] = data.label(i);
  }
  images_ = images.to(device_);
  labels_ = labels.to(device_);
  batch_shape_tail_ = order.options().flatten ? Shape{static_cast<std::int64_t>(pixels)} : Shape{1};
  if (!order.options().flatten) batch_shape_tail_.insert(batch_shape_tail_.end(), sample.begin(), sample.end());
}

void PreloadedLoader::start_epoch(std::int64_t epoch) {
  const std::vector<std::size_t> order = order_.epoch_order(epoch);
  std::vector<std::int32_t> index(order.begin(), order.end());
  index_ = from_vector(index, {static_cast<std::int64_t>(index.size())}).to(device_);  // one copy per epoch
  cursor_ = 0;
  batch_ = order_.options().batch_size;
  end_ = order_.options().drop_last ? index.size() / batch_ * batch_ : index.size();
  stats_ = {};
}

std::optional<DeviceBatch> PreloadedLoader::next() {
  EMBER_CHECK(index_.defined(), ValueError, "PreloadedLoader::next before start_epoch");
  if (cursor_ >= end_) return std::nullopt;
  const std::size_t rows = std::min(batch_, end_ - cursor_);
  Shape shape{static_cast<std::int64_t>(rows)};
  shape.insert(shape.end(), batch_shape_tail_.begin(), batch_shape_tail_.end());
  DeviceBatch batch{empty(shape, {.device = device_}),
                    empty({static_cast<std::int64_t>(rows)}, {.dtype = DType::i32, .device = device_})};
  gather_batch(images_, labels_, index_.narrow(0, static_cast<std::int64_t>(cursor_), static_cast<std::int64_t>(rows)),
               batch.x, batch.y, norm_.mean, norm_.std);
  cursor_ += rows;
  stats_.batches++;
  return batch;
}

}  // namespace ember::data
