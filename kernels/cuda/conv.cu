// CUDA max pooling and per-channel bias (both also in bf16 and f16, computing in f32) and batch
// normalization: ember's own kernels, twins of kernels/cpu/conv.cpp. Every reduction is one block per channel with a
// fixed tree, and the pooling backward gathers instead of scattering, so all of them are deterministic.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/batch_norm_math.h"
#include "kernels/conv.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise_math.h"

namespace ember::kernels::cuda {
namespace {

constexpr unsigned kWarpsPerBlock = kBlock / kWarp;

// Block-wide sum, valid in every thread (broadcast through shared memory).
__device__ float block_sum_all(float v) {
  __shared__ float partial[kWarpsPerBlock];
  __shared__ float total;
  v = warp_sum(v);
  const unsigned lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < kWarpsPerBlock ? partial[lane] : 0.0f;
    t = warp_sum(t);
    if (lane == 0) total = t;
  }
  __syncthreads();
  const float result = total;
  __syncthreads();  // `partial` and `total` may be reused by the caller's next call
  return result;
}

// T is float, bfloat16 or float16: compared as f32 (compute_t), copied as stored.
template <class T>
__global__ void max_pool_forward_kernel(const T* x, T* y, std::int32_t* argmax, PoolGeometry g) {
  using C = compute_t<T>;
  const std::size_t oh = g.oh(), ow = g.ow(), total = g.n * g.c * oh * ow;
  for (std::size_t o = global_thread(); o < total; o += grid_stride()) {
    const std::size_t plane = o / (oh * ow), rest = o % (oh * ow), oy = rest / ow, ox = rest % ow;
    const T* in = x + plane * g.h * g.w;
    std::size_t best = oy * g.stride * g.w + ox * g.stride;
    for (std::size_t ky = 0; ky < g.kernel; ++ky)
      for (std::size_t kx = 0; kx < g.kernel; ++kx) {
        const std::size_t i = (oy * g.stride + ky) * g.w + ox * g.stride + kx;
        if (pool_beats(static_cast<C>(in[i]), static_cast<C>(in[best]))) best = i;
      }
    y[o] = in[best];
    argmax[o] = static_cast<std::int32_t>(best);
  }
}

// One thread per input element sums the gradients of the windows whose maximum it was (in f32,
// rounded once to T).
template <class T>
__global__ void max_pool_backward_kernel(const T* dy, const std::int32_t* argmax, T* dx, PoolGeometry g) {
  const std::size_t oh = g.oh(), ow = g.ow(), total = g.n * g.c * g.h * g.w;
  for (std::size_t i = global_thread(); i < total; i += grid_stride()) {
    const std::size_t plane = i / (g.h * g.w), local = i % (g.h * g.w), y = local / g.w, x = local % g.w;
    const std::size_t oy_lo = y + 1 > g.kernel ? (y + 1 - g.kernel + g.stride - 1) / g.stride : 0;
    const std::size_t ox_lo = x + 1 > g.kernel ? (x + 1 - g.kernel + g.stride - 1) / g.stride : 0;
    const std::size_t oy_hi = y / g.stride < oh - 1 ? y / g.stride : oh - 1;
    const std::size_t ox_hi = x / g.stride < ow - 1 ? x / g.stride : ow - 1;
    float sum = 0.0f;
    for (std::size_t oy = oy_lo; oy <= oy_hi; ++oy)
      for (std::size_t ox = ox_lo; ox <= ox_hi; ++ox) {
        const std::size_t o = plane * oh * ow + oy * ow + ox;
        if (static_cast<std::size_t>(argmax[o]) == local) sum += static_cast<float>(dy[o]);
      }
    dx[i] = T(sum);
  }
}

// T is float, bfloat16 or float16, summed in f32 (compute_t) and rounded once.
template <class T>
__global__ void channel_bias_add_kernel(T* y, const T* bias, std::size_t c, std::size_t hw, std::size_t total) {
  for (std::size_t i = global_thread(); i < total; i += grid_stride())
    y[i] = T(static_cast<float>(y[i]) + static_cast<float>(bias[(i / hw) % c]));
}

// One block per channel, threads striding over (n, hw); 16-bit gradients summed in f32.
template <class T>
__global__ void channel_bias_grad_kernel(const T* dy, float* dbias, std::size_t n, std::size_t c, std::size_t hw) {
  const std::size_t ch = blockIdx.x;
  float acc = 0.0f;
  for (std::size_t j = threadIdx.x; j < n * hw; j += blockDim.x)
    acc += static_cast<float>(dy[((j / hw) * c + ch) * hw + j % hw]);
  acc = block_sum_all(acc);
  if (threadIdx.x == 0) dbias[ch] = acc;
}

__global__ void batch_norm_stats_kernel(const float* x, float* save_mean, float* save_invstd, float* running_mean,
                                        float* running_var, std::size_t n, std::size_t c, std::size_t hw,
                                        float momentum, float eps) {
  const std::size_t ch = blockIdx.x, m = n * hw;
  float acc = 0.0f;
  for (std::size_t j = threadIdx.x; j < m; j += blockDim.x) acc += x[((j / hw) * c + ch) * hw + j % hw];
  const float mean = block_sum_all(acc) / static_cast<float>(m);
  float sq = 0.0f;
  for (std::size_t j = threadIdx.x; j < m; j += blockDim.x) {
    const float d = x[((j / hw) * c + ch) * hw + j % hw] - mean;
    sq += d * d;
  }
  const float var = block_sum_all(sq) / static_cast<float>(m);
  if (threadIdx.x == 0) {
    save_mean[ch] = mean;
    save_invstd[ch] = batch_norm_invstd(var, eps);
    if (m == 0) return;  // an empty batch: NaN statistics, the running ones untouched (the CPU twin's rule)
    running_mean[ch] = batch_norm_running(running_mean[ch], mean, momentum);
    running_var[ch] = batch_norm_running(running_var[ch], batch_norm_unbiased_var(var, m), momentum);
  }
}

__global__ void batch_norm_apply_kernel(const float* x, const float* gamma, const float* beta, const float* mean,
                                        const float* invstd, float* y, std::size_t c, std::size_t hw,
                                        std::size_t total) {
  for (std::size_t i = global_thread(); i < total; i += grid_stride()) {
    const std::size_t ch = (i / hw) % c;
    const BatchNormAffine<float> a = batch_norm_affine(mean[ch], invstd[ch], gamma[ch], beta[ch]);
    y[i] = x[i] * a.scale + a.shift;
  }
}

__global__ void batch_norm_eval_kernel(const float* x, const float* gamma, const float* beta, const float* running_mean,
                                       const float* running_var, float* y, std::size_t c, std::size_t hw,
                                       std::size_t total, float eps) {
  for (std::size_t i = global_thread(); i < total; i += grid_stride()) {
    const std::size_t ch = (i / hw) % c;
    const BatchNormAffine<float> a =
        batch_norm_affine(running_mean[ch], batch_norm_invstd(running_var[ch], eps), gamma[ch], beta[ch]);
    y[i] = x[i] * a.scale + a.shift;
  }
}

__global__ void batch_norm_backward_sums_kernel(const float* dy, const float* x, const float* save_mean,
                                                const float* save_invstd, float* dgamma, float* dbeta, std::size_t n,
                                                std::size_t c, std::size_t hw) {
  const std::size_t ch = blockIdx.x, m = n * hw;
  float s_dy = 0.0f, s_dy_xhat = 0.0f;
  for (std::size_t j = threadIdx.x; j < m; j += blockDim.x) {
    const std::size_t i = ((j / hw) * c + ch) * hw + j % hw;
    s_dy += dy[i];
    s_dy_xhat += dy[i] * (x[i] - save_mean[ch]) * save_invstd[ch];
  }
  s_dy = block_sum_all(s_dy);
  s_dy_xhat = block_sum_all(s_dy_xhat);
  if (threadIdx.x == 0) {
    dbeta[ch] = s_dy;
    dgamma[ch] = s_dy_xhat;
  }
}

__global__ void batch_norm_backward_dx_kernel(const float* dy, const float* x, const float* gamma,
                                              const float* save_mean, const float* save_invstd, const float* dgamma,
                                              const float* dbeta, float* dx, std::size_t c, std::size_t hw,
                                              std::size_t m, std::size_t total) {
  for (std::size_t i = global_thread(); i < total; i += grid_stride()) {
    const std::size_t ch = (i / hw) % c;
    dx[i] = batch_norm_input_grad(dy[i], x[i], save_mean[ch], save_invstd[ch], gamma[ch], static_cast<float>(m),
                                  dbeta[ch], dgamma[ch]);
  }
}

}  // namespace

template <class T>
void max_pool2d_forward(const T* x, T* y, std::int32_t* argmax, const PoolGeometry& g, cudaStream_t stream) {
  launch_n<max_pool_forward_kernel<T>>(g.n * g.c * g.oh() * g.ow(), stream, x, y, argmax, g);
}

template <class T>
void max_pool2d_backward(const T* dy, const std::int32_t* argmax, T* dx, const PoolGeometry& g, cudaStream_t stream) {
  launch_n<max_pool_backward_kernel<T>>(g.n * g.c * g.h * g.w, stream, dy, argmax, dx, g);
}

template <class T>
void channel_bias_add(T* y, const T* bias, std::size_t n, std::size_t c, std::size_t hw, cudaStream_t stream) {
  const std::size_t total = n * c * hw;
  launch_n<channel_bias_add_kernel<T>>(total, stream, y, bias, c, hw, total);
}

namespace {
// One block per channel (the block's threads sum its values in a fixed order).
LaunchShape per_channel(std::size_t c) { return {dim3(static_cast<unsigned>(c))}; }
}  // namespace

template <class T>
void channel_bias_grad(const T* dy, float* dbias, std::size_t n, std::size_t c, std::size_t hw, cudaStream_t stream) {
  if (c == 0) return;
  launch<channel_bias_grad_kernel<T>>(per_channel(c), stream, dy, dbias, n, c, hw);
}

#define EMBER_INSTANTIATE_FOR_TYPE(T)                                                                        \
  template void channel_bias_add<T>(T*, const T*, std::size_t, std::size_t, std::size_t, cudaStream_t);      \
  template void channel_bias_grad<T>(const T*, float*, std::size_t, std::size_t, std::size_t, cudaStream_t); \
  template void max_pool2d_forward<T>(const T*, T*, std::int32_t*, const PoolGeometry&, cudaStream_t);       \
  template void max_pool2d_backward<T>(const T*, const std::int32_t*, T*, const PoolGeometry&, cudaStream_t);
EMBER_INSTANTIATE_FOR_TYPE(float)
EMBER_INSTANTIATE_FOR_TYPE(bfloat16)
EMBER_INSTANTIATE_FOR_TYPE(float16)
#undef EMBER_INSTANTIATE_FOR_TYPE

void batch_norm_forward_train(const float* x, const float* gamma, const float* beta, float* y, float* save_mean,
                              float* save_invstd, float* running_mean, float* running_var, std::size_t n, std::size_t c,
                              std::size_t hw, float momentum, float eps, cudaStream_t stream) {
  if (c == 0) return;
  launch<batch_norm_stats_kernel>(per_channel(c), stream, x, save_mean, save_invstd, running_mean, running_var, n, c,
                                  hw, momentum, eps);
  const std::size_t total = n * c * hw;
  launch_n<batch_norm_apply_kernel>(total, stream, x, gamma, beta, save_mean, save_invstd, y, c, hw, total);
}

void batch_norm_forward_eval(const float* x, const float* gamma, const float* beta, const float* running_mean,
                             const float* running_var, float* y, std::size_t n, std::size_t c, std::size_t hw,
                             float eps, cudaStream_t stream) {
  const std::size_t total = n * c * hw;
  launch_n<batch_norm_eval_kernel>(total, stream, x, gamma, beta, running_mean, running_var, y, c, hw, total, eps);
}

void batch_norm_backward(const float* dy, const float* x, const float* gamma, const float* save_mean,
                         const float* save_invstd, float* dx, float* dgamma, float* dbeta, std::size_t n, std::size_t c,
                         std::size_t hw, cudaStream_t stream) {
  if (c == 0) return;
  launch<batch_norm_backward_sums_kernel>(per_channel(c), stream, dy, x, save_mean, save_invstd, dgamma, dbeta, n, c,
                                          hw);
  const std::size_t total = n * c * hw;
  launch_n<batch_norm_backward_dx_kernel>(total, stream, dy, x, gamma, save_mean, save_invstd, dgamma, dbeta, dx, c, hw,
                                          n * hw, total);
}

}  // namespace ember::kernels::cuda
