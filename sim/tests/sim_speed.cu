// How fast the software GPU runs kernels: simulated threads per second for a block-reduction kernel
// (shared memory, barriers, warp shuffles, a grid-stride read) in 256-thread blocks. A program,
// not a test: its figures go into docs/simulator.md.
//   sim_speed [blocks] [repeats]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "launch_raw.cuh"

namespace {

constexpr unsigned kThreads = 256;

__global__ void block_sums(const float* in, int n, float* out) {
  __shared__ float partial[kThreads];
  float v = 0.0f;
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x))
    v += in[i];
  partial[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = kThreads / 2; half >= 32; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    v = partial[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int blocks = argc > 1 ? std::atoi(argv[1]) : 64;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const int n = blocks * static_cast<int>(kThreads) * 4;
  std::vector<float> host(static_cast<std::size_t>(n), 1.0f);
  DeviceBuffer<float> in(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(blocks));
  cudaMemcpy(in.data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    launch_raw<block_sums>(blocks, kThreads, 0, nullptr, in.data, n, out.data);
    cudaDeviceSynchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(blocks * static_cast<double>(kThreads) / s);
  }
  std::vector<float> sums(static_cast<std::size_t>(blocks));
  cudaMemcpy(sums.data(), out.data, sums.size() * sizeof(float), cudaMemcpyDeviceToHost);
  if (sums[0] != 4.0f * kThreads) {
    std::fprintf(stderr, "sim_speed: block 0 summed to %g, expected %u\n", sums[0], 4 * kThreads);
    return 1;
  }
  std::sort(rates.begin(), rates.end());
  std::printf("sim_speed: %d blocks of %u threads, median of %d: %.0f simulated threads/s\n", blocks, kThreads, repeats,
              rates[rates.size() / 2]);
  return 0;
}
