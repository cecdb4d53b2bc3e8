// Devices, dtypes, CUDA availability reporting on a machine without a usable GPU, storage and
// its statistics.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "base/dtype.h"
#include "core/cuda/runtime.h"
#include "core/ops/op_helpers.h"
#include "core/tensor/device.h"
#include "core/tensor/storage.h"
#include "core/tensor/tensor.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;

TEST_CASE("Device parses and prints cpu, cuda and cuda:N") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::parse("cuda:12").index == 12);
  CHECK(Device::cpu().str() == "cpu");
  CHECK(Device::cuda(1).str() == "cuda:1");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", ""}) {
    INFO(bad);
    CHECK_THAT(message_of<ValueError>([&] { Device::parse(bad); }), Contains("expected 'cpu', 'cuda' or 'cuda:N'"));
  }
}

TEST_CASE("DType sizes and names") {
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(dtype_size(DType::i32) == 4);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK(dtype_size(DType::u8) == 1);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_name(DType::i64) == "i64");
  CHECK(parse_dtype("u8") == DType::u8);
  CHECK(parse_dtype("bf16") == DType::bf16);
  CHECK((is_floating(DType::bf16) && is_half(DType::f16) && !is_half(DType::f32)));
  CHECK_THAT(message_of<ValueError>([] { parse_dtype("f8"); }),
             Contains("unknown dtype 'f8': expected one of f32, f64, i32, i64, u8, bf16, f16"));
  CHECK(dtype_of<float> == DType::f32);
  CHECK(dtype_of<std::int64_t> == DType::i64);
}

TEST_CASE("without a usable GPU, CUDA is reported unavailable with a reason") {
  if (cuda::is_available()) EMBER_SKIP_CASE("a usable CUDA device exists; this case is about machines without one");
  CHECK(cuda::device_count() == 0);
  CHECK_FALSE(cuda::unavailable_reason().empty());
  CHECK(Device::best() == Device::cpu());
  CHECK_THAT(Device::best_reason(), Contains("cpu (no CUDA device: "));
}

TEST_CASE("asking for CUDA where none is usable says what was found and what to do") {
  if (cuda::is_available()) EMBER_SKIP_CASE("a usable CUDA device exists; this case is about machines without one");
  const std::string message = message_of<DeviceError>([] { zeros({2}).to(Device::cuda(0)); });
  CHECK_THAT(message, Contains("cannot use cuda:0"));
  CHECK_THAT(message, Contains(cuda::unavailable_reason()));
  CHECK_THAT(message, Contains("Device::best()"));
  CHECK_THAT(message, Contains("--device cpu"));
  CHECK_THROWS_AS(zeros({2}, {.device = Device::cuda(0)}), DeviceError);
  CHECK_THROWS_AS(cuda::Stream(Device::cuda(0)), DeviceError);
  CHECK_THROWS_AS(cuda::synchronize(Device::cuda(0)), DeviceError);
}

TEST_CASE("the CUDA runtime's per-device calls refuse the CPU, naming it, in every build") {
  // The CPU has no stream and no device-side error record; these once answered with cuda:0's
  // (or indexed an array at -1).
  const auto refused = [](auto&& call) { return message_of<DeviceError>(call); };
  for (const std::string& message :
       {refused([] { cuda::current_stream(Device::cpu()); }), refused([] { cuda::compute_stream(Device::cpu()); }),
        refused([] { cuda::device_error_record(Device::cpu()); })}) {
    CHECK_THAT(message, Contains("expected a CUDA device, but got cpu"));
  }
  CHECK_THAT(refused([] { cuda::current_stream(Device::cpu()); }), Contains("cuda::current_stream"));
  CHECK_THAT(refused([] { cuda::device_error_record(Device::cpu()); }), Contains("cuda::device_error_record"));
}

TEST_CASE("EMBER_DEVICE overrides Device::best()") {
  {
    testing::EnvScope cpu("EMBER_DEVICE", "cpu");
    CHECK(Device::best() == Device::cpu());
    CHECK_THAT(Device::best_reason(), Contains("set by EMBER_DEVICE"));
  }
  {
    testing::EnvScope tpu("EMBER_DEVICE", "tpu");
    CHECK_THROWS_AS(Device::best(), ValueError);
  }
  if (!cuda::is_available()) {
    testing::EnvScope cuda("EMBER_DEVICE", "cuda:0");
    CHECK_THROWS_AS(Device::best(), DeviceError);
  }
  testing::EnvScope unset("EMBER_DEVICE", nullptr);
  CHECK_NOTHROW(Device::best());
}

TEST_CASE("the device mismatch message names both devices, the op and the argument") {
  const std::string message = ext::device_mismatch_message("cross_entropy", "target", Device::cuda(0), Device::cpu());
  CHECK_THAT(message, Contains("Expected all tensors to be on the same device, but found cuda:0 and cpu "
                               "(argument 'target' of cross_entropy)"));
}

TEST_CASE("host storage counts allocations, bytes in use and peak") {
  const MemoryStats before = memory_stats(Device::cpu());
  {
    Storage a(1000, Device::cpu(), MemoryKind::pageable);
    Storage b(24, Device::cpu(), MemoryKind::pageable);
    const MemoryStats during = memory_stats(Device::cpu());
    CHECK(during.allocations == before.allocations + 2);
    CHECK(during.bytes_in_use == before.bytes_in_use + 1024);
    CHECK(during.peak_bytes_in_use >= during.bytes_in_use);
    CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
    Storage moved(std::move(a));
    CHECK(moved.bytes() == 1000);
    CHECK(a.data() == nullptr);
  }
  const MemoryStats after = memory_stats(Device::cpu());
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.frees == before.frees + 2);
  Storage empty(0, Device::cpu(), MemoryKind::pageable);
  CHECK(empty.data() == nullptr);
  CHECK(memory_stats(Device::cpu()).allocations == after.allocations);
}

TEST_CASE("pinned memory falls back to pageable memory where no CUDA device is usable") {
  if (cuda::is_available()) EMBER_SKIP_CASE("a usable CUDA device exists; this case is about machines without one");
  Storage s(256, Device::cpu(), MemoryKind::pinned);
  CHECK(s.kind() == MemoryKind::pageable);
  CHECK_FALSE(s.is_pinned());
  const Tensor t = ones({4}).pin_memory();
  CHECK_FALSE(t.is_pinned());
  CHECK(t.to_vector<float>() == std::vector<float>{1, 1, 1, 1});
  CHECK_THROWS_AS(Storage(16, Device::cpu(), MemoryKind::device), ValueError);
}
