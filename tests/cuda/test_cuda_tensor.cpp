// Tensors on a real GPU: round trips of every dtype, pinned and pageable, blocking and not;
// the device mistakes' errors; streams and events ordering work; the memory pool.
#include <catch2/catch.hpp>

#include <cstring>
#include <sstream>

#include "core/ops/ops.h"
#include "core/tensor/storage.h"
#include "cuda/cuda_helpers.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

namespace {
template <class T>
std::vector<T> pattern(std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>((i * 2654435761u) % 251);
  return v;
}

template <class T>
void check_round_trips() {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000003}})
    for (bool pinned : {false, true})
      for (bool non_blocking : {false, true}) {
        INFO("dtype=" << dtype_of<T> << " n=" << n << " pinned=" << pinned << " non_blocking=" << non_blocking);
        const auto values = pattern<T>(n);
        Tensor host = from_vector(values, {static_cast<std::int64_t>(n)});
        if (pinned) host = host.pin_memory();
        CHECK(host.is_pinned() == pinned);
        const Tensor dev = host.to(kGpu, non_blocking);
        CHECK(dev.device() == kGpu);
        const Tensor back = dev.to(Device::cpu(), non_blocking);
        CHECK(back.device() == Device::cpu());
        // A non_blocking copy back lands in pinned memory; reading it waits for the copy.
        CHECK((n == 0 || std::memcmp(back.data<T>(), values.data(), n * sizeof(T)) == 0));  // (memcmp of null: UB)
      }
}
}  // namespace

TEST_CASE("host-device round trips of every dtype, pinned and pageable, with and without non_blocking") {
  check_round_trips<float>();
  check_round_trips<double>();
  check_round_trips<std::int32_t>();
  check_round_trips<std::int64_t>();
  check_round_trips<std::uint8_t>();
}

TEST_CASE("device-to-device copies, clone, copy_ and fill_ on the GPU") {
  Tensor a = arange(10).to(kGpu);
  Tensor b = a.clone();
  CHECK_FALSE(b.storage() == a.storage());
  b.fill_(3.0);
  CHECK(a.to_vector<float>()[9] == 9.0f);
  CHECK(b.to_vector<float>() == std::vector<float>(10, 3.0f));
  Tensor c = zeros({10}, {.device = kGpu});
  c.copy_(a);
  CHECK(c.to_vector<float>() == a.to_vector<float>());
  c.copy_(ones({10}));  // from the host
  CHECK(c.to_vector<float>() == std::vector<float>(10, 1.0f));
  CHECK(a.to(kGpu).is_same(a));
  CHECK(a.to(DType::i64).to_vector<std::int64_t>()[9] == 9);
  CHECK(a.narrow(0, 2, 3).to_vector<float>() == std::vector<float>{2, 3, 4});
}

TEST_CASE("mixing devices names the op, the argument and both devices") {
  const Tensor gpu = ones({2, 3}, {.device = kGpu});
  const Tensor cpu = ones({2, 3});
  CHECK_THAT(
      testing::message_of<DeviceError>([&] { add(gpu, cpu); }),
      Contains("Expected all tensors to be on the same device, but found cuda:0 and cpu (argument 'other' of add)"));
  const Tensor target = zeros({2}, {.dtype = DType::i64});
  CHECK_THAT(testing::message_of<DeviceError>([&] { cross_entropy(gpu, target); }),
             Contains("found cuda:0 and cpu (argument 'target' of cross_entropy)"));
  CHECK_THAT(testing::message_of<DeviceError>([&] {
               linear(cpu, ones({4, 3}, {.device = kGpu}));
             }),
             Contains("(argument 'weight' of linear)"));
}

TEST_CASE("reading GPU data on the host without .cpu() is an error, not a crash") {
  Tensor gpu = ones({4}, {.device = kGpu});
  CHECK_THAT(testing::message_of<DeviceError>([&] { gpu.data<float>(); }), Contains("on cuda:0"));
  CHECK_THAT(testing::message_of<DeviceError>([&] { gpu.data<float>(); }), Contains(".cpu()"));
  CHECK_THROWS_AS(gpu.at<float>({0}), DeviceError);
  std::ostringstream out;
  CHECK_THAT(testing::message_of<DeviceError>([&] { out << gpu; }), Contains("print t.cpu()"));
  CHECK(ones({1}, {.device = kGpu}).item<float>() == 1.0f);  // item() and to_vector() copy implicitly
  CHECK(gpu.to_vector<float>() == std::vector<float>(4, 1.0f));
  CHECK_THROWS_AS(gpu.pin_memory(), DeviceError);
}

TEST_CASE("an event orders a copy on a side stream before a kernel on the compute stream") {
  const std::size_t n = 1 << 22;
  Tensor host = arange(static_cast<std::int64_t>(n)).pin_memory();
  cuda::Stream copy_stream(kGpu);
  cuda::Event copied(kGpu);
  Tensor dev;
  {
    cuda::StreamGuard on_copy_stream(copy_stream);
    dev = host.to(kGpu, /*non_blocking=*/true);  // asynchronous: returns before the copy ends
    copied.record(copy_stream.handle());
  }
  copied.wait(cuda::compute_stream(kGpu));
  const Tensor result = relu(dev - 100.0);  // on the compute stream, after the copy
  const auto values = result.to_vector<float>();
  CHECK(values[0] == 0.0f);
  CHECK(values[n - 1] == static_cast<float>(n - 1) - 100.0f);
  cuda::Event start(kGpu, cuda::EventTiming::on), end(kGpu, cuda::EventTiming::on);
  start.record(gpu_stream());
  sum(dev);
  end.record(gpu_stream());
  end.synchronize();
  CHECK(end.query());
  CHECK(cuda::Event::elapsed_ms(start, end) >= 0.0f);
  // Events only order streams unless told to time: asking one for a time is an error that says so.
  cuda::Event plain(kGpu);
  plain.record(gpu_stream());
  plain.synchronize();
  CHECK_THROWS_WITH(cuda::Event::elapsed_ms(start, plain), Contains("EventTiming::on"));
}

TEST_CASE("allocating and freeing the same sizes in a loop does not grow the pool") {
  synchronize(kGpu);
  const MemoryStats before = memory_stats(kGpu);
  std::size_t reserved_after_first = 0;
  const int rounds = small_test_sizes() ? 20 : 200;  // (each round fills a million floats)
  for (int i = 0; i < rounds; ++i) {
    Tensor a = empty({1 << 20}, {.device = kGpu});
    Tensor b = empty({12345}, {.device = kGpu});
    a.fill_(1.0);
    b.fill_(2.0);
    if (i == 0) reserved_after_first = memory_stats(kGpu).reserved_bytes;
  }
  synchronize(kGpu);
  const MemoryStats after = memory_stats(kGpu);
  CHECK(after.allocations == before.allocations + 2 * static_cast<std::size_t>(rounds));
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.reserved_bytes <= reserved_after_first);
  CHECK(after.peak_bytes_in_use >= (std::size_t{1} << 22));
}

TEST_CASE("more than the device holds is an OutOfMemoryError with the figures and what to try, not sticky") {
  std::size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  Tensor held = empty({1 << 20}, {.device = kGpu});  // 4 MiB that the message must count
  synchronize(kGpu);
  const MemoryStats before = memory_stats(kGpu);
  const auto elements = static_cast<std::int64_t>(total_bytes / sizeof(float) + (std::int64_t{1} << 28));
  std::ostringstream held_text;  // what the message must say the tensors hold, `held` included
  held_text << "tensors hold " << before.bytes_in_use / (1024.0 * 1024.0) << " MiB";
  REQUIRE(before.bytes_in_use >= (std::size_t{4} << 20));
  CHECK_THROWS_MATCHES(empty({elements}, {.device = kGpu}), OutOfMemoryError,
                       Catch::Matchers::Predicate<OutOfMemoryError>(
                           [&](const OutOfMemoryError& e) {
                             const std::string m = e.what();
                             return m.find("CUDA out of memory on cuda:0") != std::string::npos &&
                                    m.find(held_text.str()) != std::string::npos &&
                                    m.find("Try a smaller batch size") != std::string::npos;
                           },
                           "names the device, what tensors hold and what to try"));
  // Nothing was counted, and the failure left no error behind: the next allocation and kernel work.
  const MemoryStats after = memory_stats(kGpu);
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.allocations == before.allocations);
  Tensor next = empty({1000}, {.device = kGpu});
  next.fill_(3.0);
  CHECK(next.cpu().to_vector<float>()[999] == 3.0f);
}

TEST_CASE("non_blocking copies to the host reuse cached pinned blocks: one cudaHostAlloc for a loop") {
  const Tensor source = arange(0, 5000, 1, {.device = kGpu});
  Tensor first = source.to(Device::cpu(), /*non_blocking=*/true);
  REQUIRE(first.is_pinned());
  first = Tensor();  // freed into the cache once its copy has landed
  const MemoryStats before = pinned_memory_stats();
  for (int i = 0; i < 20; ++i) {
    const Tensor host = (source + static_cast<double>(i)).to(Device::cpu(), /*non_blocking=*/true);
    const auto values = host.to_vector<float>();  // waits for the copy
    REQUIRE(values[4999] == 4999.0f + static_cast<float>(i));
  }
  const MemoryStats after = pinned_memory_stats();
  CHECK(after.allocations == before.allocations + 20);
  if (host_cache_enabled()) CHECK(after.system_allocations == before.system_allocations);
}

TEST_CASE("a bad target on the GPU is reported at the next synchronization, naming the op and value") {
  const Tensor logits = zeros({4, 3}, {.device = kGpu});
  const Tensor target = from_vector<std::int64_t>({0, 1, 5, 2}, {4}).to(kGpu);
  Tensor loss;
  CHECK_NOTHROW(loss = cross_entropy(logits, target));  // the op itself does not synchronize
  const std::string message = testing::message_of<IndexError>([&] { synchronize(kGpu); });
  CHECK_THAT(message, Contains("cross_entropy: target 5 at row 2 is out of range [0, 3)"));
  CHECK_THAT(message, Contains("next synchronization"));
  CHECK_NOTHROW(synchronize(kGpu));  // the record was cleared
  cross_entropy(logits, target);
  CHECK_THROWS_AS(loss.item<float>(), IndexError);  // item() synchronizes too
}

TEST_CASE("of many bad targets the GPU reports the lowest row with its own value, as the CPU does") {
  // Rows in many blocks, bad ones far apart: whichever block runs first, row 5 is reported, with
  // its value (Note [which bad input is reported]). The software GPU shuffles the block order.
  const std::int64_t rows = 2000;
  std::vector<std::int64_t> t(static_cast<std::size_t>(rows), 1);
  t[1999] = -4;
  t[1000] = 12;
  t[37] = 3;
  t[5] = 77;
  const Tensor targets = from_vector(t, {rows});
  const Tensor logits = zeros({rows, 3});
  for (int run = 0; run < 4; ++run) {
    INFO("run " << run);
    cross_entropy(logits.to(kGpu), targets.to(kGpu));
    CHECK_THAT(testing::message_of<IndexError>([&] { synchronize(kGpu); }), Contains("target 77 at row 5 "));
  }
  CHECK_THAT(testing::message_of<IndexError>([&] { cross_entropy(logits, targets); }), Contains("target 77 at row 5 "));
}
