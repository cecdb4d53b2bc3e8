// CUDA reductions. Every result comes from a fixed tree (warp shuffles, then a fixed combination
// order), never from floating-point atomics, so repeated runs give bit-identical sums.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "base/error.h"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace ember::kernels::cuda {
namespace {

constexpr unsigned kWarpsPerBlock = kBlock / kWarp;

// Block-wide sum of one value per thread; the result is valid in thread 0.
__device__ float block_sum(float v) {
  __shared__ float partial[kWarpsPerBlock];
  v = warp_sum(v);
  const unsigned lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < kWarpsPerBlock ? partial[threadIdx.x] : 0.0f;
  if (warp == 0) v = warp_sum(v);
  return v;
}

// The sums read T (float, bfloat16 or float16) and add in f32; each result is rounded once to Out.

// One warp per row of `reduce` contiguous elements (inner == 1).
template <class T, class Out>
__global__ void sum_rows_kernel(const T* x, Out* out, std::size_t outer, std::size_t reduce, float scale) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= outer) return;
  const T* r = x + row * reduce;
  float acc = 0.0f;
  for (std::size_t i = lane; i < reduce; i += kWarp) acc += static_cast<float>(r[i]);
  acc = warp_sum(acc);
  if (lane == 0) out[row] = Out(acc * scale);
}

// First pass of a long reduction over few rows (split as sum_workspace_size decides): block
// (chunk, row) sums its chunk.
template <class T>
__global__ void sum_chunks_kernel(const T* x, float* partials, std::size_t reduce, std::size_t chunks) {
  const std::size_t row = blockIdx.y, chunk = blockIdx.x;
  const std::size_t per_chunk = ceil_div(reduce, chunks);
  const std::size_t begin = chunk * per_chunk;
  const std::size_t end = begin + per_chunk < reduce ? begin + per_chunk : reduce;
  const T* r = x + row * reduce;
  float acc = 0.0f;
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += static_cast<float>(r[i]);
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[row * chunks + chunk] = acc;
}

// Second pass: one block per row sums that row's chunk partials.
template <class Out>
__global__ void sum_partials_kernel(const float* partials, Out* out, std::size_t chunks, float scale) {
  const float* p = partials + blockIdx.x * chunks;
  float acc = 0.0f;
  for (std::size_t i = threadIdx.x; i < chunks; i += blockDim.x) acc += p[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = Out(acc * scale);
}

// (value, index) maximum with NaN counted as largest and ties going to the lower index — the
// same order as the CPU twin's left-to-right scan.
__device__ bool better(float v, long long i, float best_v, long long best_i) {
  const bool v_nan = isnan(v), b_nan = isnan(best_v);
  if (v_nan != b_nan) return v_nan;
  if (!v_nan && v != best_v) return v > best_v;
  return i < best_i;
}

__global__ void max_rows_kernel(const float* x, float* values, std::int64_t* indices, std::size_t rows,
                                std::size_t cols) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* r = x + row * cols;
  float best_v = -INFINITY;
  long long best_i = static_cast<long long>(cols);  // "none yet": loses every tie
  for (std::size_t c = lane; c < cols; c += kWarp)
    if (better(r[c], static_cast<long long>(c), best_v, best_i)) {
      best_v = r[c];
      best_i = static_cast<long long>(c);
    }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other_v = __shfl_xor_sync(0xffffffffu, best_v, offset);
    const long long other_i = __shfl_xor_sync(0xffffffffu, best_i, offset);
    if (better(other_v, other_i, best_v, best_i)) {
      best_v = other_v;
      best_i = other_i;
    }
  }
  if (lane == 0) {
    if (values) values[row] = best_v;
    if (indices) indices[row] = best_i;
  }
}

template <class A, class B>
__global__ void count_equal_kernel(const A* a, const B* b, std::int64_t* count, std::size_t n) {
  __shared__ unsigned long long block_count;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  unsigned long long mine = 0;
  for (std::size_t i = global_thread(); i < n; i += grid_stride())
    mine += static_cast<long long>(a[i]) == static_cast<long long>(b[i]);
  // Integer atomics are exact and order-independent, so the count is deterministic.
  if (mine) atomicAdd(&block_count, mine);
  __syncthreads();
  if (threadIdx.x == 0 && block_count) atomicAdd(reinterpret_cast<unsigned long long*>(count), block_count);
}

// One warp per row.
LaunchShape warp_per_row(std::size_t rows) { return {dim3(static_cast<unsigned>(ceil_div(rows, kWarpsPerBlock)))}; }

}  // namespace

template <class T, class Out>
void sum(const T* x, Out* out, std::size_t outer, std::size_t reduce, std::size_t inner, float scale, float* workspace,
         cudaStream_t stream) {
  const std::size_t n_out = outer * inner;
  if (n_out == 0) return;
  if (reduce == 0) {
    fill(out, Out(0.0f * scale), n_out, stream);  // the CPU twin's empty sum times scale: NaN for a mean
    return;
  }
  if (inner > 1) {
    column_sum<ColumnSource::plain>(x, static_cast<const T*>(nullptr), static_cast<T*>(nullptr), out, outer, reduce,
                                    inner, scale, workspace, stream);
    return;
  }
  const std::size_t partials = sum_workspace_size(outer, reduce, inner);
  if (partials > 0) {
    const std::size_t chunks = partials / outer;
    launch<sum_chunks_kernel<T>>({dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(outer))}, stream, x,
                                 workspace, reduce, chunks);
    launch<sum_partials_kernel<Out>>({dim3(static_cast<unsigned>(outer))}, stream, static_cast<const float*>(workspace),
                                     out, chunks, scale);
    return;
  }
  launch<sum_rows_kernel<T, Out>>(warp_per_row(outer), stream, x, out, outer, reduce, scale);
}

// Every pair of the three types, so that callers may visit both dtypes.
#define EMBER_INSTANTIATE_SUM(T, Out) \
  template void sum<T, Out>(const T*, Out*, std::size_t, std::size_t, std::size_t, float, float*, cudaStream_t);
#define EMBER_INSTANTIATE_SUMS_INTO(Out) \
  EMBER_INSTANTIATE_SUM(float, Out)      \
  EMBER_INSTANTIATE_SUM(bfloat16, Out)   \
  EMBER_INSTANTIATE_SUM(float16, Out)
EMBER_INSTANTIATE_SUMS_INTO(float)
EMBER_INSTANTIATE_SUMS_INTO(bfloat16)
EMBER_INSTANTIATE_SUMS_INTO(float16)
#undef EMBER_INSTANTIATE_SUMS_INTO
#undef EMBER_INSTANTIATE_SUM

void max_last_dim(const float* x, float* values, std::int64_t* indices, std::size_t rows, std::size_t cols,
                  cudaStream_t stream) {
  if (rows == 0) return;
  launch<max_rows_kernel>(warp_per_row(rows), stream, x, values, indices, rows, cols);
}

template <class A, class B>
void count_equal(const A* a, const B* b, std::int64_t* count, std::size_t n, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(std::int64_t), stream));
  launch_n<count_equal_kernel<A, B>>(n, stream, a, b, count, n);
}

template void count_equal<std::int64_t, std::int32_t>(const std::int64_t*, const std::int32_t*, std::int64_t*,
                                                      std::size_t, cudaStream_t);
template void count_equal<std::int64_t, std::int64_t>(const std::int64_t*, const std::int64_t*, std::int64_t*,
                                                      std::size_t, cudaStream_t);
template void count_equal<std::int32_t, std::int32_t>(const std::int32_t*, const std::int32_t*, std::int64_t*,
                                                      std::size_t, cudaStream_t);

}  // namespace ember::kernels::cuda
