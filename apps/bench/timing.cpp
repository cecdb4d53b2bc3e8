#include "apps/bench/timing.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "apps/bench/case.h"
#include "core/cuda/runtime.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ember::apps::bench {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One call's microseconds: a monotonic clock on the CPU; on a GPU, CUDA events recorded around
// it on the stream that ops on the device are issued on.
class Stopwatch {
 public:
  explicit Stopwatch(Device device) : device_(device) {
    if (device.is_cuda()) start_.emplace(device, cuda::EventTiming::on), stop_.emplace(device, cuda::EventTiming::on);
  }
  template <class Call>
  double us(Call&& call) {
    if (!device_.is_cuda()) {
      const auto t0 = Clock::now();
      call();
      return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    }
    const cudaStream_t stream = cuda::current_stream(device_);
    start_->record(stream);
    call();
    stop_->record(stream);
    stop_->synchronize();
    return 1000.0 * cuda::Event::elapsed_ms(*start_, *stop_);
  }

 private:
  Device device_;
  std::optional<cuda::Event> start_, stop_;
};

}  // namespace

// The warm-up pass: a buffer's first use after a long idle can cost page faults, which belong
// to no kernel.
double time_us(const std::function<void(int)>& run, int rotations, int repeat, Device device) {
  for (int r = 0; r < std::max(rotations, 2); ++r) run(r % rotations);
  Stopwatch stopwatch(device);
  std::vector<double> samples;
  for (int i = 0; i < repeat; ++i) samples.push_back(stopwatch.us([&] { run(i % rotations); }));
  return median(samples);
}

std::size_t cache_flush_bytes([[maybe_unused]] Device device) {
#if EMBER_WITH_CUDA
  if (device.is_cuda()) {
    int l2 = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device.index));
    return 2 * static_cast<std::size_t>(l2);
  }
#endif
  return std::size_t{64} << 20;  // CPU: twice a 32 MiB last-level cache
}

// Copy: a 256 MiB memcpy on the CPU, a 1 GiB device-to-device copy on a GPU. GEMM: SGEMM of
// OpenBLAS 1024³ on the CPU, of cuBLAS 4096³ (fp32) on a GPU.
Ceilings measure_ceilings(Device device, int repeat) {
  const bool gpu = device.is_cuda();
  const int runs = gpu ? std::max(5, repeat / 3) : std::max(3, repeat / 5);
  Ceilings c;
  const std::size_t bytes = gpu ? std::size_t{1} << 30 : std::size_t{256} << 20;
  const Tensor src = full({static_cast<std::int64_t>(bytes)}, 1, {.dtype = DType::u8, .device = device}),
               dst = full({static_cast<std::int64_t>(bytes)}, 2, {.dtype = DType::u8, .device = device});
  void* to = dst.raw_bytes();
  const void* from = src.raw_bytes();
  [[maybe_unused]] const cudaStream_t stream = gpu ? cuda::current_stream(device) : nullptr;
  const double us = time_us(
      [&](int) {
#if EMBER_WITH_CUDA
        if (gpu) {
          CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream));
          return;
        }
#endif
        std::memcpy(to, from, bytes);
      },
      1, runs, device);
  c.copy_gb_per_s = 2.0 * bytes / (us * 1e3);
  c.copy_how =
      gpu ? "device-to-device copy of 1 GiB (bytes read + written)" : "memcpy of 256 MiB (bytes read + written)";
  const std::size_t s = gpu ? 4096 : 1024;
  const Tensor a = from_vector(random_vector(s * s, 1), {static_cast<std::int64_t>(s * s)}).to(device),
               b = from_vector(random_vector(s * s, 2), {static_cast<std::int64_t>(s * s)}).to(device),
               out = zeros({static_cast<std::int64_t>(s * s)}, {.device = device});
  const double gus = time_us(
      [&](int) {
        EMBER_BENCH_CALL(device, gemm, kernels::Transpose::no, kernels::Transpose::no, s, s, s, 1.0f, f32(a), s, f32(b),
                         s, 0.0f, f32(out), s);
      },
      1, runs, device);
  c.gemm_gflop_per_s = 2.0 * s * s * s / (gus * 1e3);
  c.gemm_how = gpu ? std::string("cuBLAS SGEMM 4096³ (fp32)")
                   : std::string(kernels::cpu::cpu_has_avx512f() ? "ember_avx512" : kernels::cpu::blas_name()) +
                         " SGEMM 1024³, " + std::to_string(kernels::cpu::compute_threads()) + " thread(s)";
  return c;
}

#if EMBER_WITH_CUDA
void add_transfers_and_launches(std::vector<nlohmann::json>& rows, Device device, int repeat) {
  const std::size_t bytes = std::size_t{64} << 20;
  Tensor dev = empty({static_cast<std::int64_t>(bytes)}, {.dtype = DType::u8, .device = device});
  const cudaStream_t stream = cuda::current_stream(device);
  for (bool pinned : {false, true}) {
    Tensor host = empty({static_cast<std::int64_t>(bytes)}, {.dtype = DType::u8, .pinned = pinned});
    for (bool to_device : {true, false}) {
      const double us = time_us(
          [&](int) {
            CUDA_CHECK(cudaMemcpyAsync(to_device ? dev.raw_bytes() : host.raw_bytes(),
                                       to_device ? host.raw_bytes() : dev.raw_bytes(), bytes,
                                       to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream));
          },
          1, std::max(5, repeat / 3), device);
      rows.push_back({{"family", to_device ? "copy_host_to_device" : "copy_device_to_host"},
                      {"version", pinned ? "pinned" : "pageable"},
                      {"device", device.str()},
                      {"shape", "64 MiB"},
                      {"time_us", us},
                      {"gb_per_s", bytes / (us * 1e3)},
                      {"status", "ok"},
                      {"in_use", true}});
    }
  }
  const double eager = time_us([&](int) { kernels::cuda::launch_empty(stream); }, 1, repeat, device);
  rows.push_back({{"family", "launch_overhead"},
                  {"version", "eager"},
                  {"device", device.str()},
                  {"shape", "1 empty kernel"},
                  {"time_us", eager},
                  {"status", "ok"},
                  {"in_use", true}});
  const int n = 100;
  cuda::Stream capture(device);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(capture.handle(), cudaStreamCaptureModeGlobal));
  for (int i = 0; i < n; ++i) kernels::cuda::launch_empty(capture.handle());
  CUDA_CHECK(cudaStreamEndCapture(capture.handle(), &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double replay = time_us([&](int) { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, 1, repeat, device);
  rows.push_back({{"family", "launch_overhead"},
                  {"version", "graph replay"},
                  {"device", device.str()},
                  {"shape", "100 empty kernels"},
                  {"time_us", replay / n},
                  {"status", "ok"},
                  {"in_use", false},
                  {"note", "per kernel"}});
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
}
#else
void add_transfers_and_launches(std::vector<nlohmann::json>&, Device, int) {}  // no GPU in this build
#endif

// The framework's own cost per op on the CPU: an op on a 4-element tensor, recorded or not, and
// one node's forward and backward in a chain — the bookkeeping a training step pays per op.
void add_autograd_overhead(std::vector<nlohmann::json>& rows, int repeat) {
  const Tensor x = ones({4});
  const Tensor w = ones({4}, {.requires_grad = true});
  const int n = 2000;
  auto per_op = [&](const std::function<void()>& body) {
    return time_us(
               [&](int) {
                 for (int i = 0; i < n; ++i) body();
               },
               1, std::max(5, repeat / 3), Device::cpu()) /
           n;
  };
  const double plain = per_op([&] { Tensor y = relu(x); });
  const double recorded = per_op([&] { Tensor y = relu(w); });
  const double chain = time_us(
                           [&](int) {
                             Tensor y = w;
                             for (int i = 0; i < 50; ++i) y = relu(y);
                             sum(y).backward();
                           },
                           1, std::max(5, repeat / 3), Device::cpu()) /
                       51;
  for (auto [version, us] : {std::pair{"op, not recorded", plain}, std::pair{"op, recorded", recorded},
                             std::pair{"forward + backward per node", chain}})
    rows.push_back({{"family", "autograd_overhead"},
                    {"version", version},
                    {"device", "cpu"},
                    {"shape", "4 elements"},
                    {"time_us", us},
                    {"status", "ok"},
                    {"in_use", true}});
}

void add_parallel_split(std::vector<nlohmann::json>& rows, int repeat) {
  const int threads_before = kernels::cpu::compute_threads();
  kernels::cpu::set_compute_threads(2);
  for (std::size_t n = 2048; n <= 512 * 1024; n *= 2) {
    std::vector<float> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
    // ReLU, the cheapest of the elementwise ops, so the one whose pieces must be longest.
    auto relu = [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    };
    const int runs = std::max(9, repeat);
    const double one = time_us([&](int) { relu(0, n); }, 1, runs, Device::cpu());
    const double two = time_us([&](int) { kernels::cpu::parallel_for(n, n / 2, relu); }, 1, runs, Device::cpu());
    // The same after a millisecond's pause: the worker has gone to sleep and must be woken.
    std::vector<double> after_pause;
    for (int run = 0; run < runs; ++run) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const auto start = Clock::now();
      kernels::cpu::parallel_for(n, n / 2, relu);
      after_pause.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    for (auto [version, us] : {std::pair{"1 thread", one}, std::pair{"2 pieces, 2 threads", two},
                               std::pair{"2 pieces, worker asleep", median(after_pause)}})
      rows.push_back({{"family", "parallel_split"},
                      {"version", version},
                      {"device", "cpu"},
                      {"shape", std::to_string(n) + " elements"},
                      {"time_us", us},
                      {"gb_per_s", 8.0 * static_cast<double>(n) / (us * 1e3)},
                      {"status", "ok"},
                      {"in_use", false}});
  }
  kernels::cpu::set_compute_threads(threads_before);
}

}  // namespace ember::apps::bench
