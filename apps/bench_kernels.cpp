// bench_kernels: every kernel family on the CPU and on CUDA over a sweep of sizes, against
// ceilings measured in the same run (memcpy / a device-to-device copy for bandwidth, OpenBLAS /
// cuBLAS SGEMM for arithmetic). Each version is checked against the CPU twin on the benchmark's
// own inputs before it is timed; a wrong one is refused, not timed. See docs/benchmarking.md.
// The cases are tables in apps/bench/*_cases.cpp; the clocks and ceilings are apps/bench/timing.cpp.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "apps/bench/case.h"
#include "apps/bench/timing.h"
#include "apps/common/program.h"
#include "base/config.h"
#include "core/cuda/profile.h"
#include "core/cuda/runtime.h"
#include "core/io/serialize.h"

using namespace ember;
using namespace ember::apps::bench;

namespace {

struct Settings {
  std::string device = "all", filter, json;
  std::vector<std::size_t> sizes;
  int repeat = 25;
  int threads = 1;
  bool include_broken = false;
};

std::vector<std::size_t> parse_sizes(const std::string& text) {
  std::vector<std::size_t> sizes;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0)
      throw apps::UsageError("--sizes: expected element counts like 65536,1048576");
    sizes.push_back(static_cast<std::size_t>(v));
  }
  return sizes;
}

int bench(const Settings& s, const std::string& sizes_text) {
  set_num_threads(s.threads);
  std::vector<Device> devices;
  if (s.device == "all" || s.device == "cpu") devices.push_back(Device::cpu());
  if (s.device == "all" && cuda::is_available()) devices.push_back(Device::cuda(0));
  if (s.device != "all" && s.device != "cpu") {
    std::string reason;
    devices.push_back(apps::choose_device("--device", s.device, reason));
  }
  std::regex filter;
  try {
    filter = std::regex(s.filter.empty() ? ".*" : s.filter);
  } catch (const std::regex_error&) {
    throw apps::UsageError("--filter " + s.filter + ": not a valid regular expression");
  }
  nlohmann::json report = {{"ember_version", EMBER_VERSION},
                           {"repeat", s.repeat},
                           {"ceilings", nlohmann::json::array()},
                           {"results", nlohmann::json::array()}};
  for (const Device device : devices) {
    const bool gpu = device.is_cuda();
    std::vector<std::size_t> sizes = s.sizes;
    if (sizes_text.empty())
      sizes = gpu ? std::vector<std::size_t>{1 << 16, 1 << 20, 1 << 24, 1 << 26}
                  : std::vector<std::size_t>{1 << 14, 1 << 18, 1 << 22};
    const Ceilings ceil = measure_ceilings(device, s.repeat);
    report["ceilings"].push_back({{"device", device.str()},
                                  {"copy_gb_per_s", ceil.copy_gb_per_s},
                                  {"copy", ceil.copy_how},
                                  {"gemm_gflop_per_s", ceil.gemm_gflop_per_s},
                                  {"gemm", ceil.gemm_how}});
    std::printf("\n== %s: copy ceiling %.1f GB/s (%s); GEMM ceiling %.1f GFLOP/s (%s)\n", device.str().c_str(),
                ceil.copy_gb_per_s, ceil.copy_how.c_str(), ceil.gemm_gflop_per_s, ceil.gemm_how.c_str());
    std::printf("%-24s %-22s %-26s %11s %9s %9s %7s  %s\n", "family", "version", "shape", "time (us)", "GB/s",
                "GFLOP/s", "of max", "");
    const Arena arena(device, cache_flush_bytes(device));
    std::vector<Case> cases;
    for (std::size_t n : sizes) {
      add_elementwise(cases, arena, n);
      add_rowwise(cases, arena, n);
      add_optimizers(cases, arena, n);
    }
    const bool quick = !sizes_text.empty() && *std::max_element(sizes.begin(), sizes.end()) < (1 << 16);
    add_gemms(cases, arena, quick);
    add_convolutions(cases, arena);
    add_attention(cases, arena, quick);
    add_layer_norm(cases, arena, quick);
    if (s.include_broken) add_broken(cases, arena);
    for (Case& c : cases) {
      if (!std::regex_search(c.family, filter)) continue;
      ProfileRange range(c.family.c_str());
      nlohmann::json row = {{"family", c.family},
                            {"version", c.version},
                            {"in_use", c.in_use},
                            {"device", device.str()},
                            {"shape", c.shape}};
      std::string problem;
      if (c.check) problem = c.check();
      if (!problem.empty()) {
        row["status"] = "refused";
        row["reason"] = "wrong result: " + problem;
        std::printf("%-24s %-22s %-26s REFUSED: wrong result (%s); not timed\n", c.family.c_str(), c.version.c_str(),
                    c.shape.c_str(), problem.c_str());
      } else {
        const double us = time_us(c.run, c.rotations, s.repeat, device);
        const double gbps = c.bytes / (us * 1e3), gflops = c.flops / (us * 1e3);
        const double fraction = c.flops > 0 ? gflops / ceil.gemm_gflop_per_s : gbps / ceil.copy_gb_per_s;
        row.update({{"status", "ok"},
                    {"time_us", us},
                    {"bytes", c.bytes},
                    {"gb_per_s", gbps},
                    {"fraction_of_ceiling", fraction}});
        if (c.flops > 0) row["gflop_per_s"] = gflops;
        std::printf("%-24s %-22s %-26s %11.2f %9.1f %9s %6.0f%%  %s\n", c.family.c_str(), c.version.c_str(),
                    c.shape.c_str(), us, gbps, c.flops > 0 ? std::to_string(static_cast<int>(gflops)).c_str() : "",
                    100 * fraction, c.in_use ? "(in use)" : "");
      }
      report["results"].push_back(row);
    }
    std::vector<nlohmann::json> extra;
    if (gpu && std::regex_search(std::string("copy_host_to_device launch_overhead"), filter))
      add_transfers_and_launches(extra, device, s.repeat);
    if (!gpu && std::regex_search(std::string("autograd_overhead"), filter)) add_autograd_overhead(extra, s.repeat);
    if (!gpu && std::regex_search(std::string("parallel_split"), filter)) add_parallel_split(extra, s.repeat);
    if (!gpu && std::regex_search(std::string("attention_memory"), filter)) add_attention_memory(extra, quick);
    for (const auto& row : extra) {
      std::printf("%-24s %-22s %-26s %11.3f %9s\n", row["family"].get<std::string>().c_str(),
                  row["version"].get<std::string>().c_str(), row["shape"].get<std::string>().c_str(),
                  row["time_us"].get<double>(),
                  row.contains("gb_per_s") ? std::to_string(static_cast<int>(row["gb_per_s"].get<double>())).c_str()
                  : row.contains("peak_mb")
                      ? (std::to_string(static_cast<int>(row["peak_mb"].get<double>())) + " MB peak").c_str()
                      : "");
      report["results"].push_back(row);
    }
  }
  if (!s.json.empty()) {
    const std::string text = report.dump(2) + "\n";
    write_file_atomically(s.json, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  std::string sizes_text;
  CLI::App app{"bench_kernels: every kernel family against measured ceilings, on the CPU and CUDA"};
  app.add_option("--device", s.device, "all (the CPU, and cuda:0 when usable), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--filter", s.filter, "only families whose name matches this regular expression");
  app.add_option("--sizes", sizes_text, "element counts, e.g. 65536,16777216 (default: a sweep per device)");
  app.add_option("--repeat", s.repeat, "timed runs per case (the median is reported)")
      ->capture_default_str()
      ->check(apps::positive);
  app.add_option("--json", s.json, "also write every result as JSON to this file");
  app.add_option("--threads", s.threads, "CPU threads the kernels may use (ember::set_num_threads)")
      ->capture_default_str()
      ->check(apps::positive);
  app.add_flag("--include-broken", s.include_broken,
               "add a deliberately wrong kernel version (self-test: it must be refused)");
  return apps::run_cli(app, argc, argv, [&] {
    if (!sizes_text.empty()) s.sizes = parse_sizes(sizes_text);
    return bench(s, sizes_text);
  });
}
