// The DataLoader: every sample once per epoch, orders, batch contents, workers, staging reuse,
// early stops; and the DeviceLoader on the CPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <set>
#include <thread>

#include "core/tensor/storage.h"
#include "data/loader.h"
#include "data/preloaded.h"
#include "support/helpers.h"

using namespace ember;

namespace {

// Sample i's pixels are all (i mod 251), its label is i mod 10: a batch's contents reveal which
// samples it holds (datasets here have at most 251 samples where that must be unique).
std::shared_ptr<data::TensorDataset> numbered(std::size_t n, std::size_t pixels = 6) {
  std::vector<std::uint8_t> values(n * pixels);
  std::vector<std::int64_t> labels(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t p = 0; p < pixels; ++p) values[i * pixels + p] = static_cast<std::uint8_t>(i % 251);
    labels[i] = static_cast<std::int64_t>(i % 10);
  }
  return std::make_shared<data::TensorDataset>(
      from_vector(values, {static_cast<std::int64_t>(n), 2, static_cast<std::int64_t>(pixels / 2)}),
      from_vector(labels, {static_cast<std::int64_t>(n)}));
}

// One epoch's samples, as the pixel values the batches held (checked against the labels too).
std::vector<std::size_t> epoch_samples(data::DataLoader& loader, std::int64_t epoch, std::size_t* batches = nullptr) {
  loader.start_epoch(epoch);
  std::vector<std::size_t> seen;
  std::size_t count = 0;
  while (auto batch = loader.next()) {
    const auto images = batch->images.to_vector<std::uint8_t>();
    const auto labels = batch->labels.to_vector<std::int32_t>();
    const std::size_t rows = static_cast<std::size_t>(batch->images.size(0));
    REQUIRE(batch->index == count);
    const std::size_t width = images.size() / std::max<std::size_t>(rows, 1);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t p = 0; p < width; ++p) REQUIRE(images[r * width + p] == images[r * width]);
      seen.push_back(images[r * width]);
      REQUIRE(static_cast<std::size_t>(labels[r]) == images[r * width] % 10);
    }
    ++count;
  }
  if (batches) *batches = count;
  return seen;
}

}  // namespace

TEST_CASE("every sample exactly once per epoch, for any batch size, with and without drop_last") {
  const auto dataset = numbered(103);
  for (std::size_t workers : {0, 1, 3})
    for (std::size_t batch_size : {1, 10, 103, 128})
      for (bool drop_last : {false, true}) {
        INFO("workers=" << workers << " batch=" << batch_size << " drop_last=" << drop_last);
        data::DataLoader loader(
            dataset,
            {.batch_size = batch_size, .shuffle = true, .seed = 1, .drop_last = drop_last, .num_workers = workers});
        std::size_t batches = 0;
        std::vector<std::size_t> seen = epoch_samples(loader, 0, &batches);
        CHECK(batches == loader.batches_per_epoch());
        std::sort(seen.begin(), seen.end());
        const std::size_t expected = drop_last ? 103 / batch_size * batch_size : 103;
        CHECK(seen.size() == expected);
        CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // no repeats
      }
}

TEST_CASE("a new order each epoch, the same order for the same seed, any worker count") {
  const auto dataset = numbered(200);
  data::DataLoader a(dataset, {.batch_size = 16, .seed = 7, .num_workers = 0});
  data::DataLoader b(dataset, {.batch_size = 16, .seed = 7, .num_workers = 4});
  data::DataLoader c(dataset, {.batch_size = 16, .seed = 8, .num_workers = 2});
  const auto e0 = epoch_samples(a, 0), e1 = epoch_samples(a, 1);
  CHECK(e0 != e1);
  CHECK(epoch_samples(b, 0) == e0);
  CHECK(epoch_samples(b, 1) == e1);
  CHECK(epoch_samples(a, 0) == e0);  // an epoch's order depends on (seed, epoch) only: resumable
  CHECK(epoch_samples(c, 0) != e0);
  data::DataLoader ordered(dataset, {.batch_size = 16, .shuffle = false, .num_workers = 2});
  const auto plain = epoch_samples(ordered, 3);
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(plain[i] == i % 251);
}

TEST_CASE("batch shapes and dtypes: flattened or [B, 1, H, W]") {
  const auto dataset = numbered(10, 8);
  data::DataLoader flat(dataset, {.batch_size = 4, .num_workers = 1});
  flat.start_epoch(0);
  auto batch = flat.next();
  REQUIRE(batch);
  CHECK(batch->images.shape() == Shape{4, 8});
  CHECK(batch->images.dtype() == DType::u8);
  CHECK(batch->labels.shape() == Shape{4});
  CHECK(batch->labels.dtype() == DType::i32);
  data::DataLoader image(dataset, {.batch_size = 4, .num_workers = 0, .flatten = false});
  image.start_epoch(0);
  CHECK(image.next()->images.shape() == Shape{4, 1, 2, 4});
}

TEST_CASE("staging buffers are reused: no allocation after the first epoch") {
  const auto dataset = numbered(64);
  data::DataLoader loader(dataset, {.batch_size = 8, .num_workers = 2, .pin_memory = true});
  epoch_samples(loader, 0);
  const MemoryStats host = memory_stats(Device::cpu()), pinned = pinned_memory_stats();
  epoch_samples(loader, 1);
  epoch_samples(loader, 2);
  CHECK(pinned_memory_stats().allocations == pinned.allocations);
  // Host tensors the test itself makes (to_vector copies) come and go; the loader adds none.
  CHECK(memory_stats(Device::cpu()).bytes_in_use == host.bytes_in_use);
}

TEST_CASE("a consumer that stops mid-epoch, restarts, or goes away leaves the loader clean") {
  const auto dataset = numbered(250);
  for (std::size_t workers : {0, 1, 4}) {
    data::DataLoader loader(dataset, {.batch_size = 7, .num_workers = workers});
    loader.start_epoch(0);
    for (int i = 0; i < 3; ++i) CHECK(loader.next());
    std::vector<std::size_t> seen = epoch_samples(loader, 1);  // abandons epoch 0 midway
    std::sort(seen.begin(), seen.end());
    CHECK(seen.size() == 250);
    loader.start_epoch(2);
    auto held = loader.next();
    CHECK(held);
  }  // destroyed mid-epoch with a batch on loan and workers busy: joins cleanly
  data::DataLoader loader(dataset, {.batch_size = 7, .num_workers = 0});
  loader.start_epoch(0);
  std::vector<std::optional<data::BatchLease>> held;
  for (int i = 0; i < 3; ++i) held.push_back(loader.next());
  CHECK_THROWS_AS(loader.next(), Error);  // all three staging buffers hold batches in use
  // A tensor of a batch keeps its slot even after the lease lets go; dropping it frees the slot.
  Tensor kept = held[0]->images;
  held.clear();
  auto c = loader.next(), d = loader.next();
  CHECK((c && d));
  CHECK_THROWS_AS(loader.next(), Error);
  kept = Tensor();
  CHECK(loader.next());
}

TEST_CASE("a consumer that keeps several batches still gets every one (workers woken when it waits)") {
  // Workers wake once several slots are free (data/loader.cpp, Ring::refill_at); a consumer
  // holding its last five batches never frees that many, so each batch it waits for must wake them.
  for (std::size_t workers : {1, 2}) {
    INFO(workers << " workers");
    data::DataLoader loader(numbered(200), {.batch_size = 4, .num_workers = workers});
    loader.start_epoch(0);
    std::deque<data::BatchLease> kept;
    std::size_t rows = 0;
    while (auto batch = loader.next()) {
      rows += static_cast<std::size_t>(batch->labels.size(0));
      kept.push_back(std::move(*batch));
      if (kept.size() > 5) kept.pop_front();
    }
    CHECK(rows == 200);
  }
}

TEST_CASE("a batch's tensors stay valid after the loader is gone") {
  Tensor images, labels;
  {
    data::DataLoader loader(numbered(20), {.batch_size = 5, .shuffle = false, .num_workers = 1});
    loader.start_epoch(0);
    auto batch = loader.next();
    images = batch->images;
    labels = batch->labels;
  }
  CHECK(images.to_vector<std::uint8_t>()[0] == 0);
  CHECK(labels.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 2, 3, 4});
}

TEST_CASE("workers can hand out normalized f32 batches") {
  data::DataLoader loader(
      numbered(20, 4),
      {.batch_size = 8, .shuffle = false, .num_workers = 2, .normalize = data::Normalization{0.5f, 0.25f}});
  loader.start_epoch(0);
  auto batch = loader.next();
  REQUIRE(batch->images.dtype() == DType::f32);
  CHECK(batch->images.at<float>({3, 0}) == Approx((3.0f / 255.0f - 0.5f) / 0.25f));
}

TEST_CASE("stall accounting splits the epoch into waiting and computing") {
  const auto dataset = numbered(64);
  data::DataLoader loader(dataset, {.batch_size = 8, .num_workers = 1});
  loader.start_epoch(0);
  while (auto batch = loader.next()) {
    volatile double sink = 0;
    for (int i = 0; i < 200000; ++i) sink = sink + i;  // some "compute" between batches
  }
  const data::LoaderStats stats = loader.epoch_stats();
  CHECK(stats.batches == 8);
  CHECK(stats.compute_s > 0);
}

namespace {
// A dataset whose every sample takes at least a millisecond to read: a slow disk.
class SlowDataset : public data::Dataset {
 public:
  explicit SlowDataset(std::shared_ptr<data::Dataset> inner) : inner_(std::move(inner)) {}
  std::size_t size() const override { return inner_->size(); }
  Shape sample_shape() const override { return inner_->sample_shape(); }
  void copy_image(std::size_t index, std::uint8_t* dst) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    inner_->copy_image(index, dst);
  }
  std::int32_t label(std::size_t index) const override { return inner_->label(index); }

 private:
  std::shared_ptr<data::Dataset> inner_;
};
}  // namespace

TEST_CASE("stall accounting counts the wait for a loader slower than its consumer") {
  // 8 batches of 8 samples, each sample at least 1 ms on the one worker: the consumer, which does
  // nothing, waits for at least the first batch's 8 ms. The bound comes from sleep's guarantee
  // (never shorter than asked), not from the machine's speed.
  data::DataLoader loader(std::make_shared<SlowDataset>(numbered(64)), {.batch_size = 8, .num_workers = 1});
  const auto start = std::chrono::steady_clock::now();
  loader.start_epoch(0);
  std::size_t batches = 0;
  while (auto batch = loader.next()) ++batches;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const data::LoaderStats stats = loader.epoch_stats();
  CHECK(batches == 8);
  CHECK(stats.wait_s >= 0.008);
  CHECK(stats.wait_s + stats.compute_s <= wall);  // the split never exceeds the epoch
}

TEST_CASE("DeviceLoader on the CPU yields normalized f32 batches and labels") {
  const auto dataset = numbered(20, 4);
  data::DataLoader loader(dataset, {.batch_size = 8, .shuffle = false, .num_workers = 1});
  data::DeviceLoader device_loader(loader, Device::cpu(), {.mean = 0.5f, .std = 0.25f});
  device_loader.start_epoch(0);
  std::size_t rows = 0;
  while (auto batch = device_loader.next()) {
    CHECK(batch->x.dtype() == DType::f32);
    CHECK(batch->y.dtype() == DType::i32);
    const auto x = batch->x.to_vector<float>();
    CHECK(x[0] == Approx((static_cast<float>(rows % 251) / 255.0f - 0.5f) / 0.25f));
    rows += static_cast<std::size_t>(batch->x.size(0));
  }
  CHECK(rows == 20);
}

TEST_CASE("PreloadedLoader yields exactly the streamed batches, in the DataLoader's order") {
  const auto dataset = numbered(203, 6);
  for (bool drop_last : {false, true})
    for (bool flatten : {true, false}) {
      INFO("drop_last=" << drop_last << " flatten=" << flatten);
      const data::LoaderOptions options{
          .batch_size = 32, .seed = 9, .drop_last = drop_last, .num_workers = 1, .flatten = flatten};
      data::DataLoader streamed_source(dataset, options), order(dataset, options);
      data::DeviceLoader streamed(streamed_source, Device::cpu(), {.mean = 0.1307f, .std = 0.3081f});
      data::PreloadedLoader preloaded(order, Device::cpu(), {.mean = 0.1307f, .std = 0.3081f});
      for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
        streamed.start_epoch(epoch);
        preloaded.start_epoch(epoch);
        std::size_t batches = 0;
        while (auto want = streamed.next()) {
          auto got = preloaded.next();
          REQUIRE(got);
          REQUIRE(got->x.shape() == want->x.shape());
          REQUIRE(got->x.to_vector<float>() == want->x.to_vector<float>());  // same constants: bit-identical
          REQUIRE(got->y.to_vector<std::int32_t>() == want->y.to_vector<std::int32_t>());
          ++batches;
        }
        CHECK_FALSE(preloaded.next());
        CHECK(batches == streamed_source.batches_per_epoch());
      }
    }
}

TEST_CASE("shards: rank r takes positions r, r + R, ... of the epoch's order; padded shares are equal") {
  const auto dataset = numbered(10);
  const data::LoaderOptions whole{.batch_size = 4, .seed = 7, .num_workers = 0};
  data::DataLoader all(dataset, whole);
  for (const bool pad : {true, false}) {
    std::vector<std::vector<std::size_t>> shares;
    for (std::size_t rank = 0; rank < 3; ++rank) {
      data::LoaderOptions options = whole;
      options.shard = {rank, 3, pad};
      data::DataLoader loader(dataset, options);
      shares.push_back(epoch_samples(loader, 2));
      CHECK(shares.back().size() == loader.samples_per_epoch());
    }
    const std::vector<std::size_t> order = all.epoch_order(2);
    // 10 over 3 ranks: padded, 4 each, the order's first two repeated at its end; else 4, 3, 3.
    CHECK(shares[0].size() == 4);
    CHECK(shares[1].size() == (pad ? 4u : 3u));
    CHECK(shares[2].size() == (pad ? 4u : 3u));
    for (std::size_t rank = 0; rank < 3; ++rank)
      for (std::size_t i = 0; i < shares[rank].size(); ++i) CHECK(shares[rank][i] == order[(rank + 3 * i) % 10]);
    std::multiset<std::size_t> union_of_shares;
    for (const auto& share : shares) union_of_shares.insert(share.begin(), share.end());
    CHECK(union_of_shares.size() == (pad ? 12u : 10u));
    for (std::size_t i = 0; i < 10; ++i) CHECK(union_of_shares.count(i) >= 1);
  }
}

TEST_CASE("batch k of every rank together is batch k of one loader with a batch R times larger") {
  const auto dataset = numbered(64);
  data::DataLoader one(dataset, {.batch_size = 16, .seed = 3, .num_workers = 0});
  const std::vector<std::size_t> big = epoch_samples(one, 1);
  std::vector<std::vector<std::size_t>> ranks;
  for (std::size_t rank = 0; rank < 2; ++rank) {
    data::DataLoader loader(dataset, {.batch_size = 8, .seed = 3, .num_workers = 0, .shard = {rank, 2, true}});
    ranks.push_back(epoch_samples(loader, 1));
  }
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t j = 0; j < 8; ++j)
      for (std::size_t rank = 0; rank < 2; ++rank) CHECK(ranks[rank][8 * k + j] == big[16 * k + 2 * j + rank]);
}

TEST_CASE("a shard's rank must be below the count") {
  CHECK_THROWS_AS(data::DataLoader(numbered(4), {.num_workers = 0, .shard = {2, 2, true}}), ValueError);
}
