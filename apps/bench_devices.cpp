// bench_devices: when does the GPU help? Trains a fixed number of steps of models of growing size
// — MLPs of hidden width 32 … 4096 and the MNIST CNN at growing channel widths — on the CPU and on
// CUDA with the same batches, and prints images per second on each and the GPU/CPU speedup. The
// tutorials' claim ("a tiny model gains nothing, a big CNN tens of times"), measured here.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/common/plot.h"
#include "apps/common/program.h"
#include "base/config.h"
#include "core/cuda/runtime.h"
#include "core/io/serialize.h"
#include "core/ops/ops.h"
#include "layers/models.h"
#include "layers/nn.h"
#include "optim/optimizer.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

struct Model {
  std::string name;
  bool cnn;
  std::vector<std::int64_t> sizes;  // MLP: {hidden}; CNN: {c1, c2, hidden}
};

std::shared_ptr<nn::Sequential> build(const Model& m, std::uint64_t seed) {
  Generator g(seed);
  // Every fused layer run, as mnist_train's recipes train.
  return m.cnn
             ? nn::cnn(
                   {.c1 = m.sizes[0], .c2 = m.sizes[1], .hidden = m.sizes[2], .height = 28, .width = 28, .classes = 10},
                   &g, FusionOptions::all())
             : nn::mlp(784, m.sizes, 10, &g, FusionOptions::all());
}

// Training images per second on `device`: `steps` SGD steps on the given batches (cycled) after
// two warm-up steps, ended by a synchronization; stops early after `budget_s` seconds.
double images_per_second(const Model& m, Device device, const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                         int steps, double budget_s, int& done) {
  auto model = build(m, 0);
  model->to(device);
  optim::SGD sgd(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  std::vector<Tensor> dx, dy;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    dx.push_back(xs[i].to(device));
    dy.push_back(ys[i].to(device));
  }
  auto step = [&](std::size_t i) {
    Tensor loss = cross_entropy((*model)(dx[i % dx.size()]), dy[i % dy.size()]);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
  };
  step(0);
  step(1);
  synchronize(device);
  const auto t0 = Clock::now();
  done = 0;
  while (done < steps) {
    step(static_cast<std::size_t>(done));
    ++done;
    if (device.is_cpu() && std::chrono::duration<double>(Clock::now() - t0).count() > budget_s) break;
  }
  synchronize(device);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(done * xs[0].size(0)) / s;
}

int run(int steps, std::int64_t batch, double budget_s, int threads, const std::string& json_path,
        const std::string& plot_path) {
  set_num_threads(threads);
  const bool gpu = cuda::is_available();
  std::printf("bench_devices: %d steps per model, batch %lld, %d CPU thread(s)\n", steps, static_cast<long long>(batch),
              threads);
  std::printf("GPU: %s\n", gpu ? cuda::device_description(0).c_str()
                               : ("none — only the CPU half runs (" + cuda::unavailable_reason() + ")").c_str());
  const std::vector<Model> models{{"MLP 784-32-10", false, {32}},          {"MLP 784-128-10", false, {128}},
                                  {"MLP 784-512-10", false, {512}},        {"MLP 784-1024-10", false, {1024}},
                                  {"MLP 784-4096-10", false, {4096}},      {"CNN 8-16-32", true, {8, 16, 32}},
                                  {"CNN 16-32-64", true, {16, 32, 64}},    {"CNN 32-64-128", true, {32, 64, 128}},
                                  {"CNN 64-128-256", true, {64, 128, 256}}};
  Generator data(1);
  nlohmann::json rows = nlohmann::json::array();
  apps::XYSeries cpu_series{"CPU images/s", "#1f77b4", {}}, gpu_series{"GPU images/s", "#d62728", {}},
      speedup_series{"GPU/CPU speedup", "#2ca02c", {}};
  std::printf("%-18s %12s %14s %14s %9s\n", "model", "parameters", "CPU images/s", "GPU images/s", "speedup");
  for (const Model& m : models) {
    std::vector<Tensor> xs, ys;
    for (int i = 0; i < 4; ++i) {
      xs.push_back(m.cnn ? uniform({batch, 1, 28, 28}, 0, 1, {}, &data) : uniform({batch, 784}, 0, 1, {}, &data));
      ys.push_back(randint(0, 10, {batch}, {.dtype = DType::i64}, &data));
    }
    const double params = static_cast<double>(build(m, 0)->parameter_count());
    int cpu_steps = 0, gpu_steps = 0;
    const double cpu = images_per_second(m, Device::cpu(), xs, ys, steps, budget_s, cpu_steps);
    const double gpu_rate = gpu ? images_per_second(m, Device::cuda(0), xs, ys, steps, budget_s, gpu_steps) : 0;
    std::printf("%-18s %12.0f %14.0f %14s %9s\n", m.name.c_str(), params, cpu,
                gpu ? std::to_string(static_cast<long long>(gpu_rate)).c_str() : "—",
                gpu ? (std::to_string(gpu_rate / cpu).substr(0, 5) + "x").c_str() : "—");
    std::fflush(stdout);
    nlohmann::json row = {
        {"model", m.name}, {"parameters", params}, {"cpu_images_per_s", cpu}, {"cpu_steps", cpu_steps}};
    if (gpu) row.update({{"gpu_images_per_s", gpu_rate}, {"gpu_steps", gpu_steps}, {"speedup", gpu_rate / cpu}});
    rows.push_back(row);
    cpu_series.points.push_back({params, cpu});
    if (gpu) {
      gpu_series.points.push_back({params, gpu_rate});
      speedup_series.points.push_back({params, gpu_rate / cpu});
    }
  }
  if (!gpu) std::printf("(no GPU columns: %s)\n", cuda::unavailable_reason().c_str());
  if (!json_path.empty()) {
    const std::string text =
        nlohmann::json{{"batch", batch}, {"steps", steps}, {"threads", threads}, {"rows", rows}}.dump(2) + "\n";
    write_file_atomically(json_path, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
  }
  if (!plot_path.empty()) {
    std::vector<apps::XYSeries> series{cpu_series};
    if (gpu) series = {cpu_series, gpu_series, speedup_series};
    apps::write_svg_loglog(plot_path,
                           gpu ? "training speed and GPU/CPU speedup against model size"
                               : "CPU training speed against model size (no GPU here)",
                           "parameters", gpu ? "images/s, and speedup" : "images/s", series);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_devices: when does the GPU help? Training speed on the CPU and on CUDA across model sizes"};
  int steps = 20, threads = 1;
  std::int64_t batch = 128;
  double budget = 20;
  std::string json, plot;
  app.add_option("--steps", steps, "timed training steps per model and device")
      ->capture_default_str()
      ->check(apps::positive);
  app.add_option("--batch-size", batch, "batch size")->capture_default_str()->check(apps::positive);
  app.add_option("--cpu-budget", budget, "stop a CPU measurement after this many seconds")->capture_default_str();
  app.add_option("--threads", threads, "CPU compute threads")->capture_default_str()->check(apps::positive);
  app.add_option("--json", json, "write the table as JSON");
  app.add_option("--plot", plot, "write an SVG chart of speed (and speedup) against model size");
  return apps::run_cli(app, argc, argv, [&] { return run(steps, batch, budget, threads, json, plot); });
}
