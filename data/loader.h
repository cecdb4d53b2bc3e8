// DataLoader: batches of a Dataset, assembled ahead of the consumer by worker threads into a
// fixed ring of staging buffers (pinned when asked, allocated once), a new permutation each
// epoch, reproducible from the seed; and DeviceLoader, which copies the next batch to the device
// on a separate stream while the current one is used, and normalizes the pixels there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/tensor/tensor.h"
#include "data/augment.h"
#include "data/dataset.h"

namespace ember::data {

// The share of every epoch's order one rank of a data-parallel run takes, as PyTorch's
// DistributedSampler: every rank computes the same permutation (the seed and the epoch), and rank
// r of `count` takes its positions r, r + count, r + 2·count, ... With `pad` (training) the order
// is first lengthened by repeating its beginning until its length divides by `count`, so every
// rank takes the same number of samples and batches — its collectives stay matched — and the last
// (count − N mod count) mod count samples of the epoch are seen twice. Without it (evaluation)
// nothing repeats: the shares differ by at most one sample and each sample is counted once.
// The striding also means that batch k of every rank together is batch k of one process with
// a batch count times larger, row for row.
struct Shard {
  std::size_t rank = 0, count = 1;
  bool pad = true;
};

struct LoaderOptions {
  std::size_t batch_size = 128;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
  std::size_t num_workers = 2;  // 0: batches are assembled on the caller's thread
  bool pin_memory = false;      // stage batches in pinned memory (pageable, with a warning, without CUDA)
  bool flatten = true;          // images [B, H·W]; false: [B, 1, H, W]
  // Hand out f32 images normalized by the worker threads instead of u8 pixels: for training on
  // the CPU, so the training thread does no conversion (DeviceLoader on the CPU passes them on).
  std::optional<Normalization> normalize = std::nullopt;
  Shard shard{};  // all of every epoch, unless a data-parallel rank's share
  // Training-time augmentation, applied by the workers to the u8 pixels (data/augment.h), drawn
  // from the seed, the epoch and each sample's index.
  Augmentation augment = {};
};

// How the consumer spent an epoch: waiting for batches, or working between them.
struct LoaderStats {
  double wait_s = 0;
  double compute_s = 0;
  std::size_t batches = 0;
};

class DataLoader;

// A batch from the loader's staging ring, on the host: its tensors are views of a staging slot
// (no copy), and the slot returns to the ring when the last tensor viewing it is gone — after the
// lease and anything else that holds the batch (an autograd graph that saved it, say) let go.
struct BatchLease {
  Tensor images;          // u8, or f32 with LoaderOptions::normalize; [B, H·W] or [B, 1, H, W]
  Tensor labels;          // i32, [B]
  std::size_t index = 0;  // the batch's number within its epoch
  void release() { images = labels = Tensor(); }
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  ~DataLoader();  // stops the workers, also mid-epoch
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins epoch `epoch` (its order depends on the seed and the epoch number only, so a resumed
  // run sees the same order). Abandons whatever remains of the previous epoch.
  void start_epoch(std::int64_t epoch);
  // The next batch of the epoch in order, or nothing at its end.
  std::optional<BatchLease> next();

  std::size_t batches_per_epoch() const;
  std::size_t dataset_size() const { return dataset_->size(); }
  std::size_t samples_per_epoch() const;  // this loader's share of the dataset (Shard)
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }
  LoaderStats epoch_stats() const;
  std::vector<std::size_t> epoch_order(std::int64_t epoch) const;  // the sample order of an epoch (this share)

 private:
  struct Ring;  // the slots and their bookkeeping, shared with the batches' release hooks

  void worker_loop();
  void fill(std::size_t slot, std::size_t batch);
  std::size_t batch_rows(std::size_t batch) const;

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  std::shared_ptr<Ring> ring_;
  std::vector<std::size_t> order_;
  std::int64_t epoch_ = 0;  // of order_ (augmentation draws from it)
  std::vector<std::thread> workers_;
};

struct DeviceBatch {
  Tensor x;  // f32 on the device, normalized
  Tensor y;  // i32 on the device
};

// Where a training loop draws its device batches from: a DeviceLoader (streamed from host memory
// through pinned staging) or a PreloadedLoader (the whole dataset already on the device).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual void start_epoch(std::int64_t epoch) = 0;
  virtual std::optional<DeviceBatch> next() = 0;
  virtual Device device() const = 0;
  virtual LoaderStats epoch_stats() const = 0;  // of the epoch so far
};

// Moves every batch — images and labels — to `device`. On CUDA the next batch is copied on a
// separate stream while the current one is in use (uint8 pixels: a quarter of the bytes of f32),
// ordered against compute with events; a staging buffer goes back to the loader only after the
// copy out of it finished, and a device buffer is reused only after the compute that read it.
// On the CPU it normalizes the host batch. Either way the training loop is the same.
class DeviceLoader : public BatchSource {
 public:
  DeviceLoader(DataLoader& loader, Device device, Normalization normalization = {});
  ~DeviceLoader() override;
  void start_epoch(std::int64_t epoch) override;
  std::optional<DeviceBatch> next() override;
  Device device() const override { return device_; }
  LoaderStats epoch_stats() const override;

 private:
  struct InFlight;
  void prefetch();

  DataLoader& loader_;
  Device device_;
  Normalization norm_;
  std::unique_ptr<cuda::Stream> copy_stream_;
  std::vector<std::unique_ptr<InFlight>> ring_;  // device staging, reused round-robin
  std::size_t ring_next_ = 0;
  std::optional<std::size_t> pending_;  // ring slot holding the prefetched batch
  LoaderStats stats_;
  std::chrono::steady_clock::time_point last_yield_;
  bool yielded_ = false;
};

}  // namespace ember::data
