// The DeviceLoader on a GPU: prefetched batches equal the host path's, in order, across epochs,
// with pinned and pageable staging.
#include <catch2/catch.hpp>

#include "core/ops/ops.h"
#include "cuda/cuda_helpers.h"
#include "data/loader.h"
#include "data/preloaded.h"
#include "kernels/gather.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("device prefetch yields exactly the host batches, in order, across epochs") {
  std::vector<std::uint8_t> pixels(1000 * 12);
  std::vector<std::int64_t> labels(1000);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i * 13) % 256);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  auto dataset = std::make_shared<data::TensorDataset>(from_vector(pixels, {1000, 12}), from_vector(labels, {1000}));
  for (bool pinned : {true, false}) {
    INFO("pinned=" << pinned);
    const data::LoaderOptions options{.batch_size = 64, .seed = 3, .num_workers = 2, .pin_memory = pinned};
    data::DataLoader host_loader(dataset, options), device_source(dataset, options);
    data::DeviceLoader device_loader(device_source, kGpu, {.mean = 0.1307f, .std = 0.3081f});
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      host_loader.start_epoch(epoch);
      device_loader.start_epoch(epoch);
      std::size_t batches = 0;
      while (auto expected = host_loader.next()) {
        auto got = device_loader.next();
        REQUIRE(got);
        REQUIRE(got->x.device() == kGpu);
        REQUIRE(got->y.device() == kGpu);
        const Tensor normalized = normalize_u8(expected->images, 0.1307f, 0.3081f);
        EMBER_REQUIRE_CLOSE(got->x.to_vector<float>(), normalized.to_vector<float>(), 1e-7, 1e-6);
        REQUIRE(got->y.to_vector<std::int32_t>() == expected->labels.to_vector<std::int32_t>());
        ++batches;
      }
      CHECK_FALSE(device_loader.next());
      CHECK(batches == host_loader.batches_per_epoch());
    }
    // Stopping mid-epoch with a copy in flight is safe.
    device_loader.start_epoch(5);
    CHECK(device_loader.next());
    device_loader.start_epoch(6);
  }
}

TEST_CASE("a preloaded batch on the GPU equals the CPU's gather and the streamed batch") {
  std::vector<std::uint8_t> pixels(500 * 784);
  std::vector<std::int64_t> labels(500);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i * 31) % 256);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 7) % 10);
  auto dataset = std::make_shared<data::TensorDataset>(from_vector(pixels, {500, 784}), from_vector(labels, {500}));
  const data::LoaderOptions options{.batch_size = 128, .seed = 4, .num_workers = 1, .pin_memory = true};
  data::DataLoader streamed_source(dataset, options), order(dataset, options);
  data::DeviceLoader streamed(streamed_source, kGpu, {.mean = 0.1307f, .std = 0.3081f});
  data::PreloadedLoader preloaded(order, kGpu, {.mean = 0.1307f, .std = 0.3081f});
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    streamed.start_epoch(epoch);
    preloaded.start_epoch(epoch);
    while (auto want = streamed.next()) {
      auto got = preloaded.next();
      REQUIRE(got);
      REQUIRE(got->x.device() == kGpu);
      // The same multiply-add with the same constants as normalize_u8 on the same device.
      REQUIRE(got->x.to_vector<float>() == want->x.to_vector<float>());
      REQUIRE(got->y.to_vector<std::int32_t>() == want->y.to_vector<std::int32_t>());
    }
    REQUIRE_FALSE(preloaded.next());
  }
  // The kernel against its CPU twin, with a repeated and reversed index.
  const std::vector<std::int32_t> index{499, 0, 0, 250, 3};
  std::vector<std::int32_t> label32(labels.begin(), labels.end());
  std::vector<float> x(index.size() * 784);
  std::vector<std::int32_t> y(index.size());
  ember::kernels::cpu::gather_batch(pixels.data(), label32.data(), index.data(), x.data(), y.data(), index.size(), 784,
                                    0.5f, 0.25f);
  Tensor dimages = device_copy(pixels), dlabels = device_copy(label32), dindex = device_copy(index);
  Tensor dx = poisoned<float>(x.size()), dy = poisoned<std::int32_t>(y.size());
  ember::kernels::cuda::gather_batch(dimages.raw<std::uint8_t>(), dlabels.raw<std::int32_t>(),
                                     dindex.raw<std::int32_t>(), dx.raw<float>(), dy.raw<std::int32_t>(), index.size(),
                                     784, 0.5f, 0.25f, gpu_stream());
  EMBER_REQUIRE_CLOSE(read_back<float>(dx), x, 0.0, 0.0);
  REQUIRE(read_back<std::int32_t>(dy) == y);
}
