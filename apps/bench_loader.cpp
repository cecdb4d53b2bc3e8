// bench_loader: how fast the data pipeline delivers MNIST batches — host batches with 0, 1 and 2
// workers, pageable and pinned staging; on a GPU also into device memory with and without
// prefetch, and how much of the copy time is hidden behind compute (from event timestamps).
// Medians of several epochs. Numbers, not a test: see docs/results/.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "apps/common/program.h"
#include "base/config.h"
#include "core/cuda/runtime.h"
#include "core/ops/ops.h"
#include "data/loader.h"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Row {
  std::string what;
  double images_per_s;
  double wait_share;
  std::string note;
};

// Images per second over `epochs` epochs (median), consuming batches on the host.
Row host_rate(std::shared_ptr<const data::Dataset> dataset, std::size_t batch, std::size_t workers, bool pinned,
              int epochs) {
  data::DataLoader loader(dataset, {.batch_size = batch, .num_workers = workers, .pin_memory = pinned});
  std::vector<double> rates;
  double wait_share = 0;
  for (int e = 0; e < epochs; ++e) {
    const auto t0 = Clock::now();
    loader.start_epoch(e);
    std::size_t images = 0;
    while (auto b = loader.next()) images += static_cast<std::size_t>(b->images.size(0));
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(images) / s);
    const data::LoaderStats st = loader.epoch_stats();
    wait_share = st.wait_s / std::max(1e-12, st.wait_s + st.compute_s);
  }
  char what[96];
  // Without a usable CUDA device "pinned" staging falls back to pageable memory; say so.
  std::snprintf(what, sizeof what, "host, %zu worker%s, %s", workers, workers == 1 ? "" : "s",
                !pinned                ? "pageable"
                : cuda::is_available() ? "pinned"
                                       : "pinned (pageable: no CUDA)");
  return {what, median(rates), wait_share, ""};
}

#if EMBER_WITH_CUDA
// A compute kernel of roughly the copy's length: square GEMMs on the compute stream.
void busy_compute(const Tensor& a, int repeats) {
  for (int i = 0; i < repeats; ++i) matmul(a, a);
}

Row device_rate(std::shared_ptr<const data::Dataset> dataset, Device device, std::size_t batch, bool pinned,
                bool prefetch, int epochs) {
  data::DataLoader loader(dataset, {.batch_size = batch, .num_workers = 2, .pin_memory = pinned});
  data::DeviceLoader device_loader(loader, device);
  std::vector<double> rates;
  for (int e = 0; e < epochs; ++e) {
    synchronize(device);
    const auto t0 = Clock::now();
    std::size_t images = 0;
    if (prefetch) {
      device_loader.start_epoch(e);
      while (auto b = device_loader.next()) images += static_cast<std::size_t>(b->x.size(0));
    } else {
      loader.start_epoch(e);
      while (auto b = loader.next()) {
        const Tensor x = normalize_u8(b->images.to(device));
        const Tensor y = b->labels.to(device);
        images += static_cast<std::size_t>(x.size(0));
      }
    }
    synchronize(device);
    rates.push_back(static_cast<double>(images) / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {std::string("to ") + device.str() + ", " + (pinned ? "pinned" : "pageable") +
              (prefetch ? ", prefetch" : ", no prefetch"),
          median(rates), 0, ""};
}

// Copies of one batch on a side stream against a compute kernel of similar length on the compute
// stream; the share of copy time that overlaps compute comes from event timestamps.
Row overlap(Device device, std::size_t batch, int steps) {
  const Tensor host = zeros({static_cast<std::int64_t>(batch), 784}, {.dtype = DType::u8, .pinned = true});
  Tensor dev = empty(host.shape(), {.dtype = DType::u8, .device = device});
  const Tensor a = rand({512, 512}).to(device);
  cuda::Stream copy_stream(device);
  const cudaStream_t compute = cuda::current_stream(device);
  // `dev` comes from the compute stream's pool: the copy stream starts after it, and its free
  // waits for the copy stream (Note [stream ownership of device memory] in core/tensor/storage.h).
  cuda::order_after(copy_stream.handle(), compute, device);
  dev.record_stream(copy_stream.handle());
  const auto timed = cuda::EventTiming::on;
  cuda::Event base(device, timed), c0(device, timed), c1(device, timed), k0(device, timed), k1(device, timed);
  // Calibrate: how many GEMMs take about as long as one copy.
  base.record(copy_stream.handle());
  CUDA_CHECK(
      cudaMemcpyAsync(dev.raw_bytes(), host.raw_bytes(), host.nbytes(), cudaMemcpyHostToDevice, copy_stream.handle()));
  c1.record(copy_stream.handle());
  c1.synchronize();
  const float copy_ms = cuda::Event::elapsed_ms(base, c1);
  k0.record(compute);
  busy_compute(a, 1);
  k1.record(compute);
  k1.synchronize();
  const int repeats = std::max(1, static_cast<int>(copy_ms / std::max(1e-3f, cuda::Event::elapsed_ms(k0, k1))));
  std::vector<double> hidden;
  for (int s = 0; s < steps; ++s) {
    synchronize(device);
    base.record(compute);
    base.wait(copy_stream.handle());
    k0.record(compute);
    busy_compute(a, repeats);
    k1.record(compute);
    c0.record(copy_stream.handle());
    CUDA_CHECK(cudaMemcpyAsync(dev.raw_bytes(), host.raw_bytes(), host.nbytes(), cudaMemcpyHostToDevice,
                               copy_stream.handle()));
    c1.record(copy_stream.handle());
    synchronize(device);
    const double cs = cuda::Event::elapsed_ms(base, c0), ce = cuda::Event::elapsed_ms(base, c1);
    const double ks = cuda::Event::elapsed_ms(base, k0), ke = cuda::Event::elapsed_ms(base, k1);
    const double both = std::max(0.0, std::min(ce, ke) - std::max(cs, ks));
    hidden.push_back(ce > cs ? both / (ce - cs) : 0);
  }
  char note[96];
  std::snprintf(note, sizeof note, "copy %.3f ms, %d GEMMs of 512^3 against it", copy_ms, repeats);
  return {"copy hidden behind compute", 0, median(hidden), note};
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_loader: images per second the data pipeline delivers"};
  std::string data_dir = std::getenv("MNIST_DIR") ? std::getenv("MNIST_DIR") : "data/mnist";
  std::string device_text = "auto", json_path;
  std::size_t batch = 128;
  int epochs = 5;
  app.add_option("--data", data_dir, "MNIST folder")->capture_default_str();
  app.add_option("--device", device_text, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--batch-size", batch, "batch size")->capture_default_str()->check(apps::positive);
  app.add_option("--epochs", epochs, "epochs per configuration (the median is reported)")
      ->capture_default_str()
      ->check(apps::positive);
  app.add_option("--json", json_path, "also write the results as JSON");
  return apps::run_cli(app, argc, argv, [&] {
    std::string reason;
    const Device device = apps::choose_device("--device", device_text, reason);
    set_num_threads(1);
    auto dataset = std::make_shared<data::MnistDataset>(data_dir, data::Split::train);
    std::printf("bench_loader: %zu MNIST training images, batch %zu, %d epochs per row, device %s\n", dataset->size(),
                batch, epochs, device.str().c_str());
    std::vector<Row> rows;
    for (bool pinned : {false, true})
      for (std::size_t workers : {0, 1, 2}) rows.push_back(host_rate(dataset, batch, workers, pinned, epochs));
#if EMBER_WITH_CUDA
    if (device.is_cuda()) {
      for (bool pinned : {false, true})
        for (bool prefetch : {false, true})
          rows.push_back(device_rate(dataset, device, batch, pinned, prefetch, epochs));
      rows.push_back(overlap(device, batch, 20));
    }
#endif
    nlohmann::json out = nlohmann::json::array();
    std::printf("%-40s %14s %12s  %s\n", "configuration", "images/s", "share", "note");
    for (const Row& r : rows) {
      std::printf("%-40s %14.0f %11.1f%%  %s\n", r.what.c_str(), r.images_per_s, 100 * r.wait_share, r.note.c_str());
      out.push_back(
          {{"configuration", r.what}, {"images_per_s", r.images_per_s}, {"share", r.wait_share}, {"note", r.note}});
    }
    std::printf(
        "(share: the consumer's time waiting for data for host rows; the copy time hidden behind compute "
        "for the overlap row)\n");
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    return 0;
  });
}
