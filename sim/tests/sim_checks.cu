// Deliberately broken kernels and calls, one per check of the software GPU: `sim_checks <name>`
// runs one, and the check must report it (CTest matches the report: sim/tests/CMakeLists.txt).
// Reaching the end of a check means the simulator missed it: the program says so and fails.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <string>

#include "kernels/common.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/optim.h"
#include "launch_raw.cuh"

namespace {

__global__ void divergent_barrier(float* out) {
  if (threadIdx.x < 16) return;  // half the block never reaches the barrier
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void shuffle_with_exited_lane(float* out) {
  if (threadIdx.x == 31) return;  // lane 31 is named in the full mask below
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<float>(threadIdx.x), 1);
}

__global__ void warp_waits_at_barrier(float* out) {
  // Lanes 0–15 wait in a shuffle for lanes 16–31, which wait at the block's barrier.
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  else
    __syncthreads();
}

__global__ void shared_memory_race(int* out) {
  __shared__ int slot;
  slot = static_cast<int>(threadIdx.x);  // every thread writes, nothing orders the writes
  __syncthreads();
  out[threadIdx.x] = slot;
}

__global__ void global_race_in_a_block(int* out) { out[0] = static_cast<int>(threadIdx.x); }

__global__ void global_race_between_blocks(int* out) {
  if (threadIdx.x == 0) out[0] = static_cast<int>(blockIdx.x);  // the last block to run wins
}

// Each thread reads a neighbour's slot `stride` threads on and then writes its own, after
// `barriers` barriers, with the barrier between the read and the write missing: the neighbour may
// still be about to read the slot (or, with no barrier at all, not yet have written it).
__global__ void neighbour_race(int* out, int barriers, int stride) {
  __shared__ int slot[1024];
  const unsigned t = threadIdx.x, n = blockDim.x;
  slot[t] = static_cast<int>(t);
  for (int b = 0; b < barriers; ++b) __syncthreads();
  const int seen = slot[(t + static_cast<unsigned>(stride)) % n];
  slot[t] = seen + 1;  // missing: __syncthreads() before this write
  __syncthreads();
  out[blockIdx.x * n + t] = slot[t];
}

// Two blocks of 256 threads write the same outputs after a barrier.
__global__ void blocks_write_the_same_words(int* out) {
  __shared__ int slot[256];
  slot[threadIdx.x] = static_cast<int>(blockIdx.x);
  __syncthreads();
  out[threadIdx.x] = slot[255 - threadIdx.x];
}

// A block's count of matching elements, with the shared counter's atomicAdd written as a plain add.
__global__ void plain_add_for_an_atomic(const int* in, int n, unsigned* count) {
  __shared__ unsigned block_count;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x))
    if (in[i] > 0) block_count += 1;  // should be atomicAdd(&block_count, 1u)
  __syncthreads();
  if (threadIdx.x == 0) *count = block_count;
}

// Lane 0 writes a shared word and the others read it after a shuffle, which orders no memory
// (__syncwarp would).
__global__ void shuffle_for_a_syncwarp(int* out) {
  __shared__ int word;
  if (threadIdx.x == 0) word = 7;
  const int v = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), 0);
  out[threadIdx.x] = word + v;
}

// Thread 0 publishes a value and the others read it with no barrier between: which value they see
// depends on the order the threads run in.
__global__ void lower_thread_writes_higher_reads(int* out) {
  __shared__ int word;
  // (Not a constant: a static stored only one constant may be folded to a flag the poison sets.)
  if (threadIdx.x == 0) word = static_cast<int>(blockDim.x);
  out[threadIdx.x] = word;  // missing: __syncthreads() before this read
}

// Writes one float past the launch's dynamic shared memory (n floats).
__global__ void dynamic_shared_one_past(float* out, int n) {
  float* tile = ember::kernels::cuda::dynamic_shared<float>();
  tile[threadIdx.x] = 1.0f;
  if (threadIdx.x == 0) tile[n] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}

// Reads one float past a static shared array, through a pointer (no fixed-size array indexing for
// UBSan's bounds check to see).
__global__ void static_shared_read_one_past(float* out, int n) {
  __shared__ float tile[32];
  tile[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  const float* row = tile;
  out[threadIdx.x] = row[threadIdx.x + static_cast<unsigned>(n)];
}

__global__ void write_one_past_the_end(float* out, int n) {
  if (threadIdx.x == 0) out[n] = 1.0f;
}

__global__ void fill(int* out, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) out[i] = 1;
}

__global__ void fill_gradient(float* out, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) out[i] = 0.5f;
}

__global__ void sum_into(const int* in, int n, int* out) {
  if (threadIdx.x != 0) return;
  int total = 0;
  for (int i = 0; i < n; ++i) total += in[i];
  *out = total;
}

__global__ void trap_in_one_thread(float* out) {
  if (threadIdx.x == 5) __trap();
  out[threadIdx.x] = 1.0f;
}

// The last-block pattern (kernels/cuda/grid.cuh's is_last_block) with its first fence (the
// blocks' writes before they count themselves) or second fence (the last block's reads after the
// count) left out, as `missing` says: 1 or 2 (0: none missing, the correct pattern).
__global__ void last_block_sums(const float* in, float* partial, float* total, unsigned* blocks_done, int missing) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[i] = 2.0f * in[i];
  __shared__ bool last;
  if (missing != 1) __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  if (missing != 2) __threadfence();
  if (threadIdx.x != 0) return;
  float sum = 0.0f;
  for (unsigned j = 0; j < gridDim.x * blockDim.x; ++j) sum += partial[j];
  *total = sum;
  *blocks_done = 0;
}

void run_last_block_sums(int missing) {
  constexpr int kBlocks = 4, kThreads = 64;
  DeviceBuffer<float> in(kBlocks * kThreads), partial(kBlocks * kThreads), total(1);
  DeviceBuffer<unsigned> done(1);
  cudaMemset(in.data, 0, kBlocks * kThreads * sizeof(float));
  cudaMemset(done.data, 0, sizeof(unsigned));
  launch_raw<last_block_sums>(kBlocks, kThreads, 0, nullptr, in.data, partial.data, total.data, done.data, missing);
  cudaDeviceSynchronize();
}

void run_neighbour_race(unsigned threads, int barriers, int stride) {
  DeviceBuffer<int> out(threads);
  launch_raw<neighbour_race>(1, threads, 0, nullptr, out.data, barriers, stride);
  cudaDeviceSynchronize();
}

cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  return s;
}

const std::map<std::string, std::function<void()>>& checks() {
  static const std::map<std::string, std::function<void()>> all = {
      {"divergent_barrier",
       [] {
         DeviceBuffer<float> out(64);
         launch_raw<divergent_barrier>(1, 64, 0, nullptr, out.data);
         cudaDeviceSynchronize();
       }},
      {"shuffle_with_exited_lane",
       [] {
         DeviceBuffer<float> out(32);
         launch_raw<shuffle_with_exited_lane>(1, 32, 0, nullptr, out.data);
         cudaDeviceSynchronize();
       }},
      {"warp_waits_at_barrier",
       [] {
         DeviceBuffer<float> out(32);
         launch_raw<warp_waits_at_barrier>(1, 32, 0, nullptr, out.data);
         cudaDeviceSynchronize();
       }},
      {"shared_memory_race",
       [] {
         DeviceBuffer<int> out(64);
         launch_raw<shared_memory_race>(1, 64, 0, nullptr, out.data);
         cudaDeviceSynchronize();
       }},
      {"global_race_in_a_block",
       [] {
         DeviceBuffer<int> out(1);
         launch_raw<global_race_in_a_block>(1, 64, 0, nullptr, out.data);
         cudaDeviceSynchronize();
       }},
      {"global_race_between_blocks",
       [] {
         DeviceBuffer<int> out(1);
         launch_raw<global_race_between_blocks>(16, 32, 0, nullptr, out.data);
         cudaDeviceSynchronize();
       }},
      {"race_in_a_warp_after_the_first_barrier", [] { run_neighbour_race(256, 1, 1); }},
      {"race_between_warps_after_the_second_barrier", [] { run_neighbour_race(256, 2, 32); }},
      {"race_in_a_block_of_1024_threads", [] { run_neighbour_race(1024, 1, 512); }},
      {"race_between_blocks_after_a_barrier",
       [] {
         DeviceBuffer<int> out(256);
         launch_raw<blocks_write_the_same_words>(2, 256, 0, nullptr, out.data);
         cudaDeviceSynchronize();
       }},
      {"plain_add_for_an_atomic",
       [] {
         DeviceBuffer<int> in(512);
         DeviceBuffer<unsigned> count(1);
         cudaMemset(in.data, 1, 512 * sizeof(int));
         launch_raw<plain_add_for_an_atomic>(1, 256, 0, nullptr, in.data, 512, count.data);
         cudaDeviceSynchronize();
       }},
      {"shuffle_for_a_syncwarp",
       [] {
         DeviceBuffer<int> out(32);
         launch_raw<shuffle_for_a_syncwarp>(1, 32, 0, nullptr, out.data);
         cudaDeviceSynchronize();
       }},
      {"last_block_without_its_first_fence", [] { run_last_block_sums(1); }},
      {"last_block_without_its_second_fence", [] { run_last_block_sums(2); }},
      {"lower_thread_writes_higher_reads",
       [] {
         DeviceBuffer<int> out(64);
         launch_raw<lower_thread_writes_higher_reads>(1, 64, 0, nullptr, out.data);
         cudaDeviceSynchronize();
       }},
      {"dynamic_shared_one_past",
       [] {
         DeviceBuffer<float> out(64);
         launch_raw<dynamic_shared_one_past>(1, 64, 64 * sizeof(float), nullptr, out.data, 64);
         cudaDeviceSynchronize();
       }},
      {"static_shared_read_one_past",
       [] {
         DeviceBuffer<float> out(32);
         launch_raw<static_shared_read_one_past>(1, 32, 0, nullptr, out.data, 1);
         cudaDeviceSynchronize();
       }},
      {"write_one_past_the_end",
       [] {
         DeviceBuffer<float> out(100);
         launch_raw<write_one_past_the_end>(1, 32, 0, nullptr, out.data, 100);
         cudaDeviceSynchronize();
       }},
      {"use_after_stream_ordered_free",
       [] {
         cudaStream_t s = new_stream();
         int* p = nullptr;
         cudaMallocAsync(reinterpret_cast<void**>(&p), 256 * sizeof(int), s);
         cudaFreeAsync(p, s);
         launch_raw<fill>(1, 64, 0, s, p, 256);
         cudaStreamSynchronize(s);
       }},
      {"use_after_free_after_1000_allocations",
       [] {
         cudaStream_t s = new_stream();
         int* dangling = nullptr;
         cudaMallocAsync(reinterpret_cast<void**>(&dangling), 256 * sizeof(int), s);
         cudaFreeAsync(dangling, s);
         for (int i = 0; i < 1000; ++i) {  // the pool hands its block out again and again
           int* p = nullptr;
           cudaMallocAsync(reinterpret_cast<void**>(&p), 256 * sizeof(int), s);
           cudaFreeAsync(p, s);
         }
         launch_raw<fill>(1, 64, 0, s, dangling, 256);
         cudaStreamSynchronize(s);
       }},
      {"missing_stream_synchronization",
       [] {
         cudaStream_t producer = new_stream(), consumer = new_stream();
         DeviceBuffer<int> data(256), total(1);
         launch_raw<fill>(1, 64, 0, producer, data.data, 256);
         // Missing: an event recorded on `producer` that `consumer` waits for.
         launch_raw<sum_into>(1, 32, 0, consumer, data.data, 256, total.data);
         cudaDeviceSynchronize();
       }},
      {"missing_stream_wait_on_an_optimizer_parameter",
       [] {
         // ember's SGD update reads its parameters through a slot table in device memory, not
         // through its arguments: the launcher declares what the table points at.
         cudaStream_t producer = new_stream(), optimizer = new_stream();
         DeviceBuffer<float> param(256), grad(256), step(1), lr(1);
         DeviceBuffer<ember::kernels::ParamSlot> table(1);
         const float zeros[256] = {};
         for (float* p : {param.data, step.data, lr.data})
           cudaMemcpy(p, zeros, (p == param.data ? 256 : 1) * sizeof(float), cudaMemcpyHostToDevice);
         const ember::kernels::ParamSlot slot{param.data, grad.data, nullptr, nullptr, step.data, 256};
         cudaMemcpy(table.data, &slot, sizeof slot, cudaMemcpyHostToDevice);
         launch_raw<fill_gradient>(1, 64, 0, producer, grad.data, 256);
         // Missing: an event recorded on `producer` that `optimizer` waits for.
         ember::kernels::cuda::sgd_step({table.data, &slot, 1}, 256, {}, lr.data, nullptr, optimizer);
         cudaDeviceSynchronize();
       }},
      {"pinned_buffer_refilled_before_its_copy",
       [] {
         cudaStream_t s = new_stream();
         int* staging = nullptr;
         cudaHostAlloc(reinterpret_cast<void**>(&staging), 256 * sizeof(int), cudaHostAllocDefault);
         DeviceBuffer<int> device(256);
         std::memset(staging, 0, 256 * sizeof(int));
         cudaMemcpyAsync(device.data, staging, 256 * sizeof(int), cudaMemcpyHostToDevice, s);
         staging[0] = 42;  // the next batch, before the copy of this one is known to have run
         cudaStreamSynchronize(s);
       }},
      {"graph_memory_used_outside_its_graph",
       [] {
         cudaStream_t s = new_stream();
         int* p = nullptr;
         cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
         cudaMallocAsync(reinterpret_cast<void**>(&p), 256 * sizeof(int), s);  // a memory-allocation node
         cudaGraph_t graph = nullptr;
         cudaStreamEndCapture(s, &graph);
         launch_raw<fill>(1, 64, 0, s, p, 256);  // outside the graph: the memory is the graph's
         cudaStreamSynchronize(s);
       }},
      // A 16-bit C whose split-K partials cuBLAS may add in bf16 (kernels/cuda/gemm.cpp sets the flag).
      {"gemm_ex_16bit_c_with_reduced_precision_sums",
       [] {
         cublasHandle_t h = nullptr;
         cublasCreate(&h);
         DeviceBuffer<std::uint16_t> a(16), b(16), c(16);
         const float one = 1.0f, zero = 0.0f;
         cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.data, CUDA_R_16BF, 4, b.data, CUDA_R_16BF, 4, &zero,
                      c.data, CUDA_R_16BF, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
         cudaDeviceSynchronize();
       }},
      // The same through cuBLASLt, whose preference says which reductions a split may use
      // (kernels/cuda/gemm_epilogue.cpp sets the mask).
      {"lt_16bit_d_with_the_default_reduction_schemes",
       [] {
         cublasLtHandle_t h = nullptr;
         cublasLtCreate(&h);
         cublasLtMatmulDesc_t desc = nullptr;
         cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
         cublasLtMatrixLayout_t layout = nullptr;
         cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 64, 64, 64);
         cublasLtMatmulPreference_t preference = nullptr;
         cublasLtMatmulPreferenceCreate(&preference);
         cublasLtMatmulHeuristicResult_t result{};
         int found = 0;
         cublasLtMatmulAlgoGetHeuristic(h, desc, layout, layout, layout, layout, preference, 1, &result, &found);
       }},
      // ember's launch check names the earlier fault and how to find it (kernels/cuda/launch.cu).
      {"sticky_error_at_the_next_launch",
       [] {
         DeviceBuffer<float> out(32);
         launch_raw<trap_in_one_thread>(1, 32, 0, nullptr, out.data);
         cudaStreamSynchronize(nullptr);  // the fault has happened (on a GPU it may come any time before)
         try {
           ember::kernels::cuda::launch_empty(nullptr);
         } catch (const std::exception& e) {
           std::printf("%s\n", e.what());
           std::exit(0);
         }
       }},
      // A TF32-allowing descriptor (CUDNN_DEFAULT_MATH) kept for the call, though the algorithm
      // reports CUDNN_TENSOR_OP_MATH (kernels/cuda/cudnn_conv.cpp sets the reported type).
      {"convolution_under_another_math_type",
       [] {
         cudnnHandle_t h = nullptr;
         cudnnCreate(&h);
         cudnnTensorDescriptor_t x = nullptr, y = nullptr;
         cudnnFilterDescriptor_t w = nullptr;
         cudnnConvolutionDescriptor_t conv = nullptr;
         cudnnCreateTensorDescriptor(&x);
         cudnnCreateTensorDescriptor(&y);
         cudnnCreateFilterDescriptor(&w);
         cudnnCreateConvolutionDescriptor(&conv);
         cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 4, 4);
         cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 4, 4);
         cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 1, 1, 1, 1);
         cudnnSetConvolution2dDescriptor(conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
         cudnnSetConvolutionMathType(conv, CUDNN_DEFAULT_MATH);
         DeviceBuffer<float> xs(16), ws(1), ys(16);
         const float one = 1.0f, zero = 0.0f;
         cudnnConvolutionForward(h, &one, x, xs.data, w, ws.data, conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                 nullptr, 0, &zero, y, ys.data);
         cudaDeviceSynchronize();
       }},
      {"trap_is_sticky",
       [] {
         DeviceBuffer<float> out(32);
         launch_raw<trap_in_one_thread>(1, 32, 0, nullptr, out.data);
         const cudaError_t at_sync = cudaDeviceSynchronize();
         void* p = nullptr;
         const cudaError_t later = cudaMalloc(&p, 16);
         if (at_sync == cudaErrorLaunchFailure && later == cudaErrorLaunchFailure) {
           std::printf("sticky: %s after a trap, and on every later call\n", cudaGetErrorName(later));
           std::exit(0);
         }
         std::printf("after a trap: synchronize gave %s, a later call %s\n", cudaGetErrorName(at_sync),
                     cudaGetErrorName(later));
       }},
  };
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  const auto& all = checks();
  const auto it = argc == 2 ? all.find(argv[1]) : all.end();
  if (it == all.end()) {
    std::fprintf(stderr, "usage: sim_checks <check>, one of:");
    for (const auto& [name, run] : all) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  it->second();
  std::printf("sim_checks: %s: the software GPU reported nothing\n", argv[1]);
  return 1;
}
