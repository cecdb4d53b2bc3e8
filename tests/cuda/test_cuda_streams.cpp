// Memory and streams (Note [stream ownership of device memory] in core/tensor/storage.h): device memory
// used on a side stream is not reused before that stream is done with it, memory made under a
// stream guard survives the stream, pinned staging is not refilled while a copy reads it, peer
// copies are ordered on both devices, and the DeviceLoader carries batches its loader normalized.
// On the software GPU a missing order is reported by name even when timing would hide it.
#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <string>
#include <thread>

#include "core/ops/ops.h"
#include "cuda/cuda_helpers.h"
#include "data/loader.h"
#include "optim/optimizer.h"
#if EMBER_TEST_ON_SIM
#include "ember_sim/introspection.h"
#endif

using namespace ember;
using namespace ember::testing;

namespace {
std::shared_ptr<data::TensorDataset> digits(std::int64_t count, std::int64_t pixels) {
  std::vector<std::uint8_t> images(static_cast<std::size_t>(count * pixels));
  std::vector<std::int64_t> labels(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < images.size(); ++i) images[i] = static_cast<std::uint8_t>((i * 29 + 7) % 256);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  return std::make_shared<data::TensorDataset>(from_vector(images, {count, pixels}), from_vector(labels, {count}));
}
}  // namespace

TEST_CASE("memory read on a side stream is not freed for reuse before the side stream is done") {
  const std::int64_t n = 1 << 14;
  cuda::Stream side(kGpu);
  Tensor source = full({n}, 3.0, {.device = kGpu});
  Tensor copy = empty({n}, {.device = kGpu});
  cuda::order_after(side.handle(), gpu_stream(), kGpu);  // the side stream sees both made
  {
    cuda::StreamGuard on_side(side);
    copy.copy_(source, true);  // reads `source` on the side stream
  }
  source = Tensor();  // freed on the compute stream: after the side stream's read, by an event
  const Tensor reuse = full({n}, 7.0, {.device = kGpu});  // may be handed the same block
  side.synchronize();
  for (float v : copy.to_vector<float>()) REQUIRE(v == 3.0f);
  for (float v : reuse.to_vector<float>()) REQUIRE(v == 7.0f);
}

TEST_CASE("memory made while a side stream is current outlives that stream, and Tensor::record_stream") {
  Tensor made;
  {
    cuda::Stream side(kGpu);
    cuda::StreamGuard on_side(side);
    made = full({1000}, 2.0, {.device = kGpu});  // from the compute stream's pool, ordered before the side's work
    made = made * 3.0;                           // a kernel on the side stream
  }  // the stream is gone (its work done); the memory is freed later on the compute stream
  for (float v : made.to_vector<float>()) REQUIRE(v == 6.0f);
  made = Tensor();
  synchronize(kGpu);
  // Ops run under a guard over a tensor made elsewhere: the caller records the stream.
  cuda::Stream other(kGpu);
  Tensor input = full({1000}, 1.5, {.device = kGpu});
  cuda::order_after(other.handle(), gpu_stream(), kGpu);
  Tensor output;
  {
    cuda::StreamGuard on_other(other);
    output = input + input;
    input.record_stream(other.handle());
  }
  input = Tensor();
  other.synchronize();
  for (float v : output.to_vector<float>()) REQUIRE(v == 3.0f);
  CHECK_THROWS_AS(zeros({2}).record_stream(other.handle()), DeviceError);
}

TEST_CASE("a pinned staging slot is not refilled while an asynchronous copy out of it is in flight") {
  auto dataset = digits(512, 64);
  for (std::size_t workers : {std::size_t{0}, std::size_t{2}}) {
    INFO("workers=" << workers);
    data::DataLoader loader(dataset, {.batch_size = 64, .seed = 1, .num_workers = workers, .pin_memory = true});
    data::DataLoader reference(dataset, {.batch_size = 64, .seed = 1, .num_workers = 0});
    loader.start_epoch(0);
    reference.start_epoch(0);
    std::vector<Tensor> on_device;
    std::vector<std::vector<std::uint8_t>> expected;
    while (auto batch = loader.next()) {
      on_device.push_back(batch->images.to(kGpu, /*non_blocking=*/true));  // asynchronous: reads the slot later
      expected.push_back(reference.next()->images.to_vector<std::uint8_t>());
      batch->release();  // the slot goes back to the loader, which refills it for the next batch
    }
    REQUIRE(on_device.size() == 8);
    for (std::size_t b = 0; b < on_device.size(); ++b) REQUIRE(on_device[b].to_vector<std::uint8_t>() == expected[b]);
  }
}

// Note [a rank's device]: a thread that works on cuda:1 only, as rank 1 of a data-parallel run
// does, keeps cuda:1 current through its ops and never makes device 0 current (on the software GPU:
// no call of its needs device 0's context). Without set_device, the ops' guards switched back to
// device 0 after each op, a context on GPU 0 for every rank.
TEST_CASE("a thread that set its device stays there through its ops, and never touches device 0") {
  if (cuda::device_count() < 2) EMBER_SKIP_CASE("one CUDA device (two are needed: the software GPU has them)");
  const Device rank_device = Device::cuda(1);
  int current_after = -1;
  std::uint64_t device_0_uses = 0;
  std::string failure;
  std::vector<float> values;
  std::thread rank([&] {
    try {
      cuda::set_device(rank_device);
      const Tensor a = full({1000}, 2.0, {.device = rank_device});
      const Tensor host = (a * 3.0).to(Device::cpu(), /*non_blocking=*/true);  // pinned memory
      const Tensor staged = empty({256}, {.pinned = true}).to(rank_device, /*non_blocking=*/true);
      cuda::synchronize(rank_device);
      values = host.to_vector<float>();
      (void)staged;
      cudaGetDevice(&current_after);
#if EMBER_TEST_ON_SIM
      device_0_uses = ember_sim::context_uses_on_this_thread(0);
#endif
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  rank.join();
  REQUIRE(failure.empty());
  CHECK(values[999] == 6.0f);
  CHECK(current_after == 1);
  CHECK(device_0_uses == 0);
}

TEST_CASE("a peer copy is ordered after the destination's allocation and before its later work") {
  if (cuda::device_count() < 2) EMBER_SKIP_CASE("one CUDA device (two are needed: the software GPU has them)");
  const Device second = Device::cuda(1);
  const Tensor source = full({1 << 12}, 5.0, {.device = kGpu});
  const Tensor there = source.to(second);  // allocated on cuda:1's stream, copied on cuda:0's
  const Tensor doubled = there * 2.0;      // cuda:1's stream, after the copy
  for (float v : doubled.to_vector<float>()) REQUIRE(v == 10.0f);
  const Tensor back = doubled.to(kGpu);
  for (float v : back.to_vector<float>()) REQUIRE(v == 10.0f);
}

TEST_CASE("the DeviceLoader carries f32 batches the loader's workers normalized") {
  auto dataset = digits(300, 49);
  const data::Normalization norm{.mean = 0.25f, .std = 0.5f};
  for (bool pinned : {true, false}) {
    INFO("pinned=" << pinned);
    data::DataLoader host(dataset, {.batch_size = 32, .seed = 2, .num_workers = 1, .normalize = norm});
    data::DataLoader source(dataset,
                            {.batch_size = 32, .seed = 2, .num_workers = 1, .pin_memory = pinned, .normalize = norm});
    data::DeviceLoader device_loader(source, kGpu, norm);
    host.start_epoch(0);
    device_loader.start_epoch(0);
    std::size_t batches = 0;
    while (auto want = host.next()) {
      auto got = device_loader.next();
      REQUIRE(got);
      REQUIRE(got->x.dtype() == DType::f32);
      REQUIRE(got->x.to_vector<float>() == want->images.to_vector<float>());
      REQUIRE(got->y.to_vector<std::int32_t>() == want->labels.to_vector<std::int32_t>());
      ++batches;
    }
    CHECK(batches == 10);
  }
}

TEST_CASE("an optimizer step on a side stream, after an event, updates with the gradients made before it") {
  // The update reads each parameter and gradient through its slot table, not its arguments: the
  // software GPU's stream checks see them because the launcher declares them (launch_reaching in
  // kernels/cuda/launch.cuh), so a missing wait here is reported there by name. The second step
  // is the one that matters: the first allocates (state, the table), and an allocation for a
  // side stream orders that stream after the compute stream by itself.
  Tensor weight = full({4096}, 1.0, {.device = kGpu, .requires_grad = true});
  optim::SGD sgd({weight}, {.lr = 0.5});
  cuda::Stream side(kGpu);
  cuda::Event grads_made(kGpu), stepped(kGpu);
  for (float expected : {0.0f, -1.0f}) {
    sgd.zero_grad(false);
    sum(weight * 2.0).backward();  // the gradients, 2 everywhere, on the compute stream
    grads_made.record(gpu_stream());
    grads_made.wait(side.handle());
    {
      cuda::StreamGuard on_side(side);
      sgd.step();
    }
    stepped.record(side.handle());
    stepped.wait(gpu_stream());  // the next forward pass reads the weights the step wrote
    for (float v : weight.to_vector<float>()) REQUIRE(v == expected);  // 1 − 0.5 · 2, then once more
  }
}
