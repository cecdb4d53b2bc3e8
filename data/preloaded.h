// The whole dataset in device memory — u8 images and i32 labels, a quarter of the bytes of f32 —
// copied once; each batch is then one gather launch. This is the tutorials' "data preloaded on
// the device" setup, the baseline that ember's streamed DeviceLoader is measured against. Every
// epoch's order is the DataLoader's for the same options and seed, so a preloaded run and a
// streamed one see exactly the same batches, normalized identically.
#pragma once

#include "data/loader.h"

namespace ember::data {

class PreloadedLoader : public BatchSource {
 public:
  // Takes the dataset, batch size, shuffling, seed, drop_last and flatten options from `order`.
  PreloadedLoader(const DataLoader& order, Device device, Normalization normalization = {});
  void start_epoch(std::int64_t epoch) override;
  std::optional<DeviceBatch> next() override;
  Device device() const override { return device_; }
  LoaderStats epoch_stats() const override { return stats_; }
  std::size_t bytes_on_device() const { return images_.nbytes() + labels_.nbytes(); }

 private:
  const DataLoader& order_;
  Device device_;
  Normalization norm_;
  Tensor images_, labels_;  // [N, H·W] u8, [N] i32 on the device
  Tensor index_;            // this epoch's order, i32 on the device
  Shape batch_shape_tail_;  // [H·W] or [1, H, W]
  std::size_t cursor_ = 0, batch_ = 0, end_ = 0;
  LoaderStats stats_;
};

}  // namespace ember::data
