// Augmentation: what a crop and a flip do to an image, draws that depend on (seed, epoch, index)
// alone, and the loader applying them to training batches the same on any number of workers.
#include <catch2/catch.hpp>

#include <numeric>
#include <set>

#include "data/augment.h"
#include "data/loader.h"
#include "support/helpers.h"

using namespace ember;

namespace {

// A 5×5 image whose pixel (y, x) is 10·y + x + 1 (no zero: the padding's zeros show).
std::vector<std::uint8_t> ramp() {
  std::vector<std::uint8_t> v(25);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 5; ++x) v[y * 5 + x] = static_cast<std::uint8_t>(10 * y + x + 1);
  return v;
}

std::vector<std::vector<std::uint8_t>> one_epoch(data::DataLoader& loader, std::int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<std::vector<std::uint8_t>> images(loader.dataset_size());
  while (auto batch = loader.next()) {
    const auto pixels = batch->images.to_vector<std::uint8_t>();
    const auto labels = batch->labels.to_vector<std::int32_t>();
    for (std::size_t r = 0; r < labels.size(); ++r)  // the label is the sample's index here
      images[static_cast<std::size_t>(labels[r])].assign(pixels.begin() + r * 25, pixels.begin() + (r + 1) * 25);
  }
  return images;
}

}  // namespace

TEST_CASE("augment: every result is a shift of the image with zeros let in, or its mirror") {
  const data::Augmentation both{.crop_padding = 2, .horizontal_flip = true};
  std::set<std::pair<int, int>> shifts;
  int flips = 0;
  for (std::size_t index = 0; index < 400; ++index) {
    std::vector<std::uint8_t> image = ramp();
    data::augment(both, image.data(), 5, 5, 9, 0, index);
    // Find the shift (and flip) that explains every pixel.
    bool explained = false;
    for (int flip = 0; flip < 2 && !explained; ++flip)
      for (int dy = -2; dy <= 2 && !explained; ++dy)
        for (int dx = -2; dx <= 2 && !explained; ++dx) {
          bool all = true;
          for (int y = 0; y < 5 && all; ++y)
            for (int x = 0; x < 5 && all; ++x) {
              const int sy = y + dy, sx = (flip ? 4 - x : x) + dx;
              const int want = (sy >= 0 && sy < 5 && sx >= 0 && sx < 5) ? 10 * sy + sx + 1 : 0;
              all = image[y * 5 + x] == want;
            }
          if (all) {
            explained = true;
            shifts.insert({dy, dx});
            flips += flip;
          }
        }
    CHECK(explained);
  }
  CHECK(shifts.size() == 25);  // every offset of the padded crop occurs
  CHECK((flips > 150 && flips < 250));
  // The same (seed, epoch, index): the same result; another epoch: another draw.
  std::vector<std::uint8_t> a = ramp(), b = ramp(), c = ramp();
  data::augment(both, a.data(), 5, 5, 9, 3, 17);
  data::augment(both, b.data(), 5, 5, 9, 3, 17);
  CHECK(a == b);
  int differ = 0;
  for (std::size_t index = 0; index < 20; ++index) {
    std::vector<std::uint8_t> e0 = ramp(), e1 = ramp();
    data::augment(both, e0.data(), 5, 5, 9, 0, index);
    data::augment(both, e1.data(), 5, 5, 9, 1, index);
    differ += e0 != e1;
  }
  CHECK(differ > 10);
  data::augment({}, c.data(), 5, 5, 9, 0, 0);
  CHECK(c == ramp());
  CHECK(both.describe() == "random crop (padding 2), horizontal flip");
}

TEST_CASE("DataLoader: augmented batches repeat on any number of workers and batch sizes") {
  const std::size_t n = 40;
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels(n);
  std::iota(labels.begin(), labels.end(), 0);
  for (std::size_t i = 0; i < n; ++i) {
    const auto image = ramp();
    pixels.insert(pixels.end(), image.begin(), image.end());
  }
  auto set = std::make_shared<data::TensorDataset>(from_vector(pixels, {40, 5, 5}), from_vector(labels, {40}));
  auto make = [&](std::size_t workers, std::size_t batch) {
    return std::make_unique<data::DataLoader>(
        set, data::LoaderOptions{.batch_size = batch,
                                 .seed = 4,
                                 .num_workers = workers,
                                 .augment = {.crop_padding = 1, .horizontal_flip = true}});
  };
  auto reference = make(0, 8);
  const auto first = one_epoch(*reference, 2);
  CHECK(one_epoch(*make(3, 8), 2) == first);
  CHECK(one_epoch(*make(2, 7), 2) == first);
  CHECK(one_epoch(*reference, 3) != first);
  int changed = 0;
  for (const auto& image : first) changed += image != ramp();
  CHECK(changed > 20);
}
