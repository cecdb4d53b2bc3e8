// The software GPU does what a GPU does: block and warp semantics, shared memory per block,
// atomics, launch limits and their error codes, streams, events, peers, memory capacity. (What
// it reports about broken kernels and calls is tested by sim_checks.cu.)
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "copies.cuh"
#include "kernels/cuda/grid.cuh"
#include "launch_raw.cuh"

using ember::kernels::cuda::dynamic_shared;

namespace {

// A block-wide tree sum through shared memory: right only if every barrier holds.
__global__ void block_sum(const int* in, int* out) {
  __shared__ int partial[256];
  partial[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

__global__ void warp_ops(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int sum = lane;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const int down = __shfl_down_sync(0xffffffffu, lane, 1, 8);  // within groups of 8
  const int up = __shfl_up_sync(0xffffffffu, lane, 2);
  const int broadcast = __shfl_sync(0xffffffffu, lane * 10, 5);
  const unsigned odd = __ballot_sync(0xffffffffu, lane % 2);
  const int any = __any_sync(0xffffffffu, lane == 7);
  const int all = __all_sync(0xffffffffu, lane < 31);
  int* o = out + threadIdx.x * 7;
  o[0] = sum;
  o[1] = down;
  o[2] = up;
  o[3] = broadcast;
  o[4] = static_cast<int>(odd);
  o[5] = any;
  o[6] = all;
}

__global__ void count_with_atomics(unsigned* count, int* largest) {
  atomicAdd(count, 1u);
  atomicMax(largest, static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x));
}

// Shared memory declared in a device function template: one array per instantiation.
template <int Tag>
__device__ int* tagged_tile() {
  __shared__ int tile[32];
  return tile;
}
__global__ void distinct_template_tiles(int* out) {
  tagged_tile<1>()[threadIdx.x] = 1;
  tagged_tile<2>()[threadIdx.x] = 2;
  __syncthreads();
  out[blockIdx.x * 32 + threadIdx.x] = tagged_tile<1>()[31 - threadIdx.x] * 10 + tagged_tile<2>()[31 - threadIdx.x];
}

// Reverses each block's slice through dynamic shared memory.
__global__ void reverse_in_dynamic_shared(const float* in, float* out) {
  float* tile = dynamic_shared<float>();
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = in[i];
  __syncthreads();
  out[i] = tile[blockDim.x - 1 - threadIdx.x];
}

// Every block and thread index of a 3-D launch, written once.
__global__ void write_indices(unsigned* out) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + thread] += block * threads + thread + 1;
}

__global__ void reads_shared_nobody_wrote(float* out) {
  __shared__ float never_written[4];
  // (A store the compiler cannot rule out: with none at all it may fold the reads to the zeros a
  // static array starts with — see docs/simulator.md.)
  if (blockIdx.x >= gridDim.x) never_written[0] = 0.0f;
  out[blockIdx.x] = never_written[blockIdx.x % 4];
}

__global__ void does_nothing(int*) {}

// Each block writes its slice's doubles; the last block (ember's is_last_block: fence, atomic,
// fence) sums all of them. Correct by CUDA's rules: the race checker must stay silent.
__global__ void last_block_total(const float* in, float* partial, float* total, unsigned* blocks_done) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[i] = 2.0f * in[i];
  if (!ember::kernels::cuda::is_last_block(blocks_done) || threadIdx.x != 0) return;
  float sum = 0.0f;
  for (unsigned j = 0; j < gridDim.x * blockDim.x; ++j) sum += partial[j];
  *total = sum;
  *blocks_done = 0;
}

// Lane 0 publishes a word to its warp through shared memory, ordered by __syncwarp.
__global__ void publish_in_a_warp(int* out) {
  __shared__ int word[2];
  const unsigned warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) word[warp] = static_cast<int>(warp) + 7;
  __syncwarp();
  out[threadIdx.x] = word[warp];
}

}  // namespace

TEST_CASE("the device reports itself honestly and there are at least two") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  CHECK(count >= 2);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK(std::string(prop.name).find("ember software GPU") != std::string::npos);
  CHECK(prop.major == 9);
  CHECK(prop.warpSize == 32);
}

TEST_CASE("a block reduction through shared memory with barriers is exact in every block") {
  const unsigned blocks = 37, threads = 256;
  std::vector<int> in(blocks * threads);
  std::iota(in.begin(), in.end(), -1000);
  DeviceBuffer<int> din(in.size()), dout(blocks);
  to_device(din.data, in);
  REQUIRE(launch_raw<block_sum>(blocks, threads, 0, nullptr, din.data, dout.data) == cudaSuccess);
  const std::vector<int> out = to_host(dout.data, blocks);
  for (unsigned b = 0; b < blocks; ++b)
    CHECK(out[b] == std::accumulate(in.begin() + b * threads, in.begin() + (b + 1) * threads, 0));
}

TEST_CASE("shuffles and votes exchange values within a warp as CUDA defines them") {
  DeviceBuffer<int> dout(64 * 7);
  REQUIRE(launch_raw<warp_ops>(1, 64, 0, nullptr, dout.data) == cudaSuccess);
  const std::vector<int> out = to_host(dout.data, 64 * 7);
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    const int* o = out.data() + t * 7;
    INFO("thread " << t);
    CHECK(o[0] == 31 * 32 / 2);
    CHECK(o[1] == (lane % 8 == 7 ? lane : lane + 1));  // the last of each group of 8 keeps its own
    CHECK(o[2] == (lane < 2 ? lane : lane - 2));
    CHECK(o[3] == 50);
    CHECK(static_cast<unsigned>(o[4]) == 0xAAAAAAAAu);
    CHECK(o[5] == 1);
    CHECK(o[6] == 0);
  }
}

TEST_CASE("atomics from every thread of every block all land") {
  DeviceBuffer<unsigned> count(1);
  DeviceBuffer<int> largest(1);
  REQUIRE(cudaMemset(count.data, 0, sizeof(unsigned)) == cudaSuccess);
  REQUIRE(cudaMemset(largest.data, 0, sizeof(int)) == cudaSuccess);
  REQUIRE(launch_raw<count_with_atomics>(100, 128, 0, nullptr, count.data, largest.data) == cudaSuccess);
  CHECK(to_host(count.data, 1)[0] == 12800u);
  CHECK(to_host(largest.data, 1)[0] == 12799);
}

TEST_CASE("fence, atomic, fence publishes blocks' writes to the last block, and __syncwarp orders a warp") {
  // In the build with the race checker these run under it: a false report would end the run.
  const unsigned blocks = 6, threads = 64;
  std::vector<float> in(blocks * threads);
  std::iota(in.begin(), in.end(), 1.0f);
  DeviceBuffer<float> din(in.size()), partial(in.size()), total(1);
  DeviceBuffer<unsigned> done(1);
  to_device(din.data, in);
  REQUIRE(cudaMemset(done.data, 0, sizeof(unsigned)) == cudaSuccess);
  for (int launch = 0; launch < 2; ++launch) {
    REQUIRE(launch_raw<last_block_total>(blocks, threads, 0, nullptr, din.data, partial.data, total.data, done.data) ==
            cudaSuccess);
    CHECK(to_host(total.data, 1)[0] == 2.0f * std::accumulate(in.begin(), in.end(), 0.0f));
    CHECK(to_host(done.data, 1)[0] == 0u);
  }
  DeviceBuffer<int> out(64);
  REQUIRE(launch_raw<publish_in_a_warp>(1, 64, 0, nullptr, out.data) == cudaSuccess);
  const std::vector<int> published = to_host(out.data, 64);
  for (int t = 0; t < 64; ++t) CHECK(published[static_cast<std::size_t>(t)] == t / 32 + 7);
}

TEST_CASE("shared memory in device function templates is one array per instantiation and per block") {
  DeviceBuffer<int> dout(3 * 32);
  REQUIRE(launch_raw<distinct_template_tiles>(3, 32, 0, nullptr, dout.data) == cudaSuccess);
  for (int v : to_host(dout.data, 3 * 32)) CHECK(v == 12);
}

TEST_CASE("dynamic shared memory holds the launch's shared bytes for each block") {
  const unsigned blocks = 5, threads = 128;
  std::vector<float> in(blocks * threads);
  std::iota(in.begin(), in.end(), 0.0f);
  DeviceBuffer<float> din(in.size()), dout(in.size());
  to_device(din.data, in);
  REQUIRE(launch_raw<reverse_in_dynamic_shared>(blocks, threads, threads * sizeof(float), nullptr, din.data,
                                                dout.data) == cudaSuccess);
  const std::vector<float> out = to_host(dout.data, in.size());
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < threads; ++t) CHECK(out[b * threads + t] == in[b * threads + threads - 1 - t]);
}

TEST_CASE("a three-dimensional grid runs every thread of every block exactly once") {
  const dim3 grid(3, 2, 2), block(4, 2, 3);
  const std::size_t n = 12 * 24;
  DeviceBuffer<unsigned> dout(n);
  REQUIRE(cudaMemset(dout.data, 0, n * sizeof(unsigned)) == cudaSuccess);
  REQUIRE(launch_raw<write_indices>(grid, block, 0, nullptr, dout.data) == cudaSuccess);
  const std::vector<unsigned> out = to_host(dout.data, n);
  for (std::size_t i = 0; i < n; ++i) CHECK(out[i] == i + 1);
}

TEST_CASE("fresh device memory, pinned memory and shared memory nobody wrote hold NaN, not zeros") {
  DeviceBuffer<float> fresh(8), out(8);
  for (float v : to_host(fresh.data, 8)) CHECK(std::isnan(v));
  float* pinned = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 8 * sizeof(float), cudaHostAllocDefault) == cudaSuccess);
  for (int i = 0; i < 8; ++i) CHECK(std::isnan(pinned[i]));  // CUDA leaves pinned memory undefined
  REQUIRE(cudaFreeHost(pinned) == cudaSuccess);
  REQUIRE(cudaMemset(out.data, 0, 8 * sizeof(float)) == cudaSuccess);
  REQUIRE(launch_raw<reads_shared_nobody_wrote>(8, 1, 0, nullptr, out.data) == cudaSuccess);
  for (float v : to_host(out.data, 8)) CHECK(std::isnan(v));
}

TEST_CASE("each launch-configuration error gives CUDA's code, which the next call clears") {
  DeviceBuffer<int> d(1);
  struct Case {
    const char* what;
    dim3 grid, block;
    std::size_t shared;
    cudaError_t expected;
  };
  const Case cases[] = {
      {"an empty grid", dim3(0), dim3(32), 0, cudaErrorInvalidConfiguration},
      {"an empty block", dim3(1), dim3(0), 0, cudaErrorInvalidConfiguration},
      {"1025 threads per block", dim3(1), dim3(1025), 0, cudaErrorInvalidConfiguration},
      {"1024 threads over x and y", dim3(1), dim3(64, 32), 0, cudaErrorInvalidConfiguration},
      {"block z of 65", dim3(1), dim3(1, 1, 65), 0, cudaErrorInvalidConfiguration},
      {"grid y of 65536", dim3(1, 65536), dim3(32), 0, cudaErrorInvalidConfiguration},
      {"grid z of 65536", dim3(1, 1, 65536), dim3(32), 0, cudaErrorInvalidConfiguration},
      {"grid x of 2^31", dim3(2147483648u), dim3(32), 0, cudaErrorInvalidConfiguration},
      {"48 KiB + 1 of dynamic shared memory", dim3(1), dim3(32), 48 * 1024 + 1, cudaErrorInvalidValue},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    CHECK(launch_raw<does_nothing>(c.grid, c.block, c.shared, nullptr, d.data) == c.expected);
    CHECK(cudaGetLastError() == cudaSuccess);  // not sticky
  }
  // The limits themselves are fine (those that run in reasonable time here).
  CHECK(launch_raw<does_nothing>(dim3(1), dim3(1024), 48 * 1024, nullptr, d.data) == cudaSuccess);
  CHECK(launch_raw<does_nothing>(dim3(1), dim3(1, 1, 64), 0, nullptr, d.data) == cudaSuccess);
  CHECK(launch_raw<does_nothing>(dim3(1, 65535), dim3(1), 0, nullptr, d.data) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("more than 48 KiB of dynamic shared memory once the kernel's attribute allows it") {
  DeviceBuffer<int> d(1);
  const std::size_t bytes = 64 * 1024;
  CHECK(launch_raw<does_nothing>(1, 32, bytes, nullptr, d.data) == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(reinterpret_cast<const void*>(does_nothing), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)) == cudaSuccess);
  CHECK(launch_raw<does_nothing>(1, 32, bytes, nullptr, d.data) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("allocating beyond the device's capacity is cudaErrorMemoryAllocation, and not sticky") {
  std::size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, total + 1) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaMallocAsync(&p, total + 1, nullptr) == cudaErrorMemoryAllocation);
  cudaGetLastError();
  REQUIRE(cudaMalloc(&p, 1024) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
}

TEST_CASE("work waits until the host needs it: a stream is not done until synchronized or queried") {
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  DeviceBuffer<int> d(1 << 16);
  REQUIRE(cudaMemsetAsync(d.data, 0, sizeof(int) << 16, s) == cudaSuccess);
  cudaEvent_t start, end;
  REQUIRE(cudaEventCreate(&start) == cudaSuccess);
  REQUIRE(cudaEventCreate(&end) == cudaSuccess);
  REQUIRE(cudaEventRecord(start, s) == cudaSuccess);
  REQUIRE(launch_raw<count_with_atomics>(64, 64, 0, s, reinterpret_cast<unsigned*>(d.data), d.data + 1) == cudaSuccess);
  REQUIRE(cudaEventRecord(end, s) == cudaSuccess);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, end) == cudaErrorNotReady);  // not run yet
  cudaGetLastError();
  REQUIRE(cudaEventSynchronize(end) == cudaSuccess);
  CHECK(cudaEventQuery(end) == cudaSuccess);
  REQUIRE(cudaEventElapsedTime(&ms, start, end) == cudaSuccess);
  CHECK(ms >= 0.0f);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  CHECK(to_host(d.data, 1)[0] == 64 * 64);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaStreamDestroy(s);
}

TEST_CASE("an event orders a kernel on one stream after a copy on another") {
  cudaStream_t copy, compute;
  REQUIRE(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) == cudaSuccess);
  std::vector<int> in(256, 3);
  int* pinned = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&pinned), in.size() * sizeof(int), cudaHostAllocDefault) ==
          cudaSuccess);
  std::memcpy(pinned, in.data(), in.size() * sizeof(int));
  DeviceBuffer<int> din(256), dout(1);
  cudaEvent_t copied;
  REQUIRE(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(din.data, pinned, 256 * sizeof(int), cudaMemcpyHostToDevice, copy) == cudaSuccess);
  REQUIRE(cudaEventRecord(copied, copy) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(compute, copied, 0) == cudaSuccess);
  REQUIRE(launch_raw<block_sum>(1, 256, 0, compute, din.data, dout.data) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(compute) == cudaSuccess);
  CHECK(to_host(dout.data, 1)[0] == 768);
  cudaEventDestroy(copied);
  cudaFreeHost(pinned);
  cudaStreamDestroy(copy);
  cudaStreamDestroy(compute);
}

TEST_CASE("a blocking stream waits for the legacy default stream, as CUDA's default-stream semantics say") {
  cudaStream_t blocking;
  REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
  DeviceBuffer<int> d(256), out(1);
  REQUIRE(cudaMemsetAsync(d.data, 0, 256 * sizeof(int), nullptr) == cudaSuccess);  // legacy stream
  REQUIRE(launch_raw<block_sum>(1, 256, 0, blocking, d.data, out.data) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(blocking) == cudaSuccess);
  CHECK(to_host(out.data, 1)[0] == 0);
  cudaStreamDestroy(blocking);
}

TEST_CASE("memory moves between two devices with peer copies") {
  std::vector<int> values(1000);
  std::iota(values.begin(), values.end(), 7);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  int* on_1 = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&on_1), values.size() * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  DeviceBuffer<int> on_0(values.size());
  to_device(on_0.data, values);
  REQUIRE(cudaMemcpyPeerAsync(on_1, 1, on_0.data, 0, values.size() * sizeof(int), nullptr) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(to_host(on_1, values.size()) == values);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  CHECK(cudaFree(on_1) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("stream-ordered allocation reuses a block freed on the same stream, at a fresh address") {
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
  const auto reserved = [&] {
    std::uint64_t bytes = 0;
    REQUIRE(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &bytes) == cudaSuccess);
    return bytes;
  };
  void* first = nullptr;
  void* second = nullptr;
  REQUIRE(cudaMallocAsync(&first, 4096, s) == cudaSuccess);
  const std::uint64_t with_first = reserved();
  REQUIRE(cudaFreeAsync(first, s) == cudaSuccess);
  REQUIRE(cudaMallocAsync(&second, 4096, s) == cudaSuccess);
  CHECK(reserved() == with_first);  // the pool's block, reissued: nothing more reserved
  CHECK(second != first);           // the old address stays freed, so a dangling use of it is reported
  REQUIRE(cudaFreeAsync(second, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  cudaStreamDestroy(s);
}
