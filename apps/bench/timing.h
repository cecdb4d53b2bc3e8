// bench_kernels' clocks: one case's median time, the ceilings every figure is compared with,
// and the measurements that are not kernels (host↔device copies, launch overhead, autograd).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor/device.h"

namespace ember::apps::bench {

// Median microseconds of one run(r), r cycling over `rotations` input sets, after a warm-up pass
// over every set: a monotonic clock on the CPU, CUDA events on the GPU.
double time_us(const std::function<void(int)>& run, int rotations, int repeat, Device device);

// Twice the last-level cache: input sets rotate until their working set exceeds it.
std::size_t cache_flush_bytes(Device device);

struct Ceilings {
  double copy_gb_per_s = 0, gemm_gflop_per_s = 0;
  std::string copy_how, gemm_how;
};
Ceilings measure_ceilings(Device device, int repeat);

// Rows of the JSON report (family, version, device, shape, time_us, ...), measured directly.
void add_transfers_and_launches(std::vector<nlohmann::json>& rows, Device device, int repeat);  // a GPU
void add_autograd_overhead(std::vector<nlohmann::json>& rows, int repeat);                      // the CPU
// The CPU pool's hand-over against the work it splits: an f32 ReLU of n elements on one thread and
// cut in two on two (parallel_split), from 2K to 512K elements, to place kElementsPerPiece.
void add_parallel_split(std::vector<nlohmann::json>& rows, int repeat);

}  // namespace ember::apps::bench
