// A training step in steady state on the CPU takes no memory from the system: its activations
// and gradients reuse the blocks the previous step freed (the host cache's statistics say so).
#include <catch2/catch.hpp>

#include "core/ops/ops.h"
#include "core/tensor/storage.h"
#include "data/loader.h"
#include "layers/models.h"
#include "optim/optimizer.h"

using namespace ember;

namespace {

// Four epochs of `model` on 512 synthetic 784-pixel images, each batch reshaped to
// [batch, image_shape...]; after the first, allocations must come from the cache only.
void check_steady_state(nn::Module& model, optim::Optimizer& optimizer, const Shape& image_shape) {
  Generator g(0);
  std::vector<std::uint8_t> pixels(512 * 784);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i * 7919) % 256);
  auto dataset = std::make_shared<data::TensorDataset>(from_vector(pixels, {512, 784}),
                                                       randint(0, 10, {512}, {.dtype = DType::i64}, &g));
  for (bool set_to_none : {true, false}) {
    data::DataLoader loader(dataset, {.batch_size = 100, .seed = 1, .num_workers = 1});
    data::DeviceLoader batches(loader, Device::cpu());
    auto epoch = [&](std::int64_t e) {
      batches.start_epoch(e);
      while (auto b = batches.next()) {  // includes a smaller last batch
        Shape shape{b->x.size(0)};
        shape.insert(shape.end(), image_shape.begin(), image_shape.end());
        Tensor loss = cross_entropy(model(b->x.reshape(shape)), b->y);
        optimizer.zero_grad(set_to_none);
        loss.backward();
        optimizer.step();
      }
    };
    epoch(0);  // warm-up: the cache fills with this step's blocks
    const MemoryStats before = memory_stats(Device::cpu());
    for (std::int64_t e = 1; e <= 3; ++e) epoch(e);
    const MemoryStats after = memory_stats(Device::cpu());
    INFO("set_to_none=" << set_to_none);
    CHECK(after.allocations > before.allocations);  // tensors were made...
    if (host_cache_enabled())                       // (AddressSanitizer builds free every block at once, by design)
      CHECK(after.system_allocations == before.system_allocations);  // ...from cached blocks only
  }
}

}  // namespace

TEST_CASE("a steady-state CPU training step performs no system allocation") {
  SECTION("the MLP with SGD") {
    Generator g(0);
    auto model = nn::mlp(784, {32}, 10, &g);
    optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    check_steady_state(*model, sgd, {784});
  }
  SECTION("the CNN (convolutions, pooling, dropout) with Adam") {
    Generator g(0);
    auto model = nn::cnn(4, 8, 16, &g);
    optim::Adam adam(model->parameters(), {.lr = 0.002});
    check_steady_state(*model, adam, {1, 28, 28});
  }
}
