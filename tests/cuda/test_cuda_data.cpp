// The DeviceLoader on a GPU: prefetched batches equal the host path's, in order, across epochs,
// with pinned and pageable staging.
#include <catch2/catch.hpp>

#include "core/ops.h"
#include "cuda/cuda_helpers.h"
#include "data/loader.h"

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
