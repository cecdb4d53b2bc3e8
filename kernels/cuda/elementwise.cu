// CUDA elementwise kernels (f32; casts and fill for every dtype). Kernels first, then launchers.
// Each op is a functor so that the op is resolved at compile time inside the loop.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/grid.cuh"
#include "kernels/elementwise.h"

namespace ember::kernels::cuda {
namespace {

struct Neg { __device__ float operator()(float x) const { return -x; } };
struct Exp { __device__ float operator()(float x) const { return expf(x); } };
struct Log { __device__ float operator()(float x) const { return logf(x); } };
struct Sqrt { __device__ float operator()(float x) const { return sqrtf(x); } };
struct Sigmoid { __device__ float operator()(float x) const { return 1.0f / (1.0f + expf(-x)); } };
struct Tanh { __device__ float operator()(float x) const { return tanhf(x); } };
struct Relu { __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; } };
struct Square { __device__ float operator()(float x) const { return x * x; } };
struct Pow {
  float exponent;
  __device__ float operator()(float x) const { return powf(x, exponent); }
};
struct Affine {
  float scale, shift;
  __device__ float operator()(float x) const { return x * scale + shift; }
};

struct Add { __device__ float operator()(float a, float b) const { return a + b; } };
struct Sub { __device__ float operator()(float a, float b) const { return a - b; } };
struct Mul { __device__ float operator()(float a, float b) const { return a * b; } };
struct Div { __device__ float operator()(float a, float b) const { return a / b; } };

struct ReluGrad { __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; } };
struct SigmoidGrad { __device__ float operator()(float dy, float y) const { return dy * y * (1.0f - y); } };
struct TanhGrad { __device__ float operator()(float dy, float y) const { return dy * (1.0f - y * y); } };

template <class F>
__global__ void map_kernel(const float* __restrict__ x, float* y, std::size_t n, F f) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) y[i] = f(x[i]);
}

template <class F>
__global__ void zip_kernel(const float* a, const float* b, float* out, std::size_t n, F f) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) out[i] = f(a[i], b[i]);
}

template <class F>
__global__ void zip_accumulate_kernel(const float* a, const float* b, float* out, std::size_t n, F f) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) out[i] += f(a[i], b[i]);
}

template <class F>
__global__ void broadcast_kernel(const float* a, const float* b, float* out, BroadcastLayout layout,
                                 std::size_t n, F f) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    long long rest = static_cast<long long>(i), off_a = 0, off_b = 0;
    for (int d = layout.ndim - 1; d >= 0; --d) {
      const long long index = rest % layout.out_shape[d];
      rest /= layout.out_shape[d];
      off_a += index * layout.a_stride[d];
      off_b += index * layout.b_stride[d];
    }
    out[i] = f(a[off_a], b[off_b]);
  }
}

__global__ void expand_kernel(const float* x, float* out, BroadcastLayout layout, std::size_t n, float scale) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    long long rest = static_cast<long long>(i), off = 0;
    for (int d = layout.ndim - 1; d >= 0; --d) {
      off += (rest % layout.out_shape[d]) * layout.a_stride[d];
      rest /= layout.out_shape[d];
    }
    out[i] = x[off] * scale;
  }
}

template <class T>
__global__ void fill_kernel(T* y, T value, std::size_t n) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) y[i] = value;
}

template <class From, class To>
__global__ void cast_kernel(const From* x, To* y, std::size_t n) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) y[i] = static_cast<To>(x[i]);
}

__global__ void normalize_u8_kernel(const std::uint8_t* x, float* y, std::size_t n, float scale, float shift) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride())
    y[i] = static_cast<float>(x[i]) * scale + shift;
}

template <class F>
void launch_map(const char* name, const float* x, float* y, std::size_t n, F f, cudaStream_t stream) {
  if (n == 0) return;
  map_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n, f);
  check_launch(name, stream);
}

template <class F>
void launch_zip(const char* name, const float* a, const float* b, float* out, std::size_t n, WriteMode mode,
                F f, cudaStream_t stream) {
  if (n == 0) return;
  if (mode == WriteMode::overwrite) zip_kernel<<<grid_for(n), kBlock, 0, stream>>>(a, b, out, n, f);
  else zip_accumulate_kernel<<<grid_for(n), kBlock, 0, stream>>>(a, b, out, n, f);
  check_launch(name, stream);
}

template <class F>
void launch_broadcast(const float* a, const float* b, float* out, const BroadcastLayout& layout, F f,
                      cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(layout.numel());
  if (n == 0) return;
  broadcast_kernel<<<grid_for(n), kBlock, 0, stream>>>(a, b, out, layout, n, f);
  check_launch("binary_broadcast", stream);
}

}  // namespace

void unary(UnaryOp op, const float* x, float* y, std::size_t n, cudaStream_t stream) {
  switch (op) {
    case UnaryOp::neg: return launch_map("unary_neg", x, y, n, Neg{}, stream);
    case UnaryOp::exp: return launch_map("unary_exp", x, y, n, Exp{}, stream);
    case UnaryOp::log: return launch_map("unary_log", x, y, n, Log{}, stream);
    case UnaryOp::sqrt: return launch_map("unary_sqrt", x, y, n, Sqrt{}, stream);
    case UnaryOp::sigmoid: return launch_map("unary_sigmoid", x, y, n, Sigmoid{}, stream);
    case UnaryOp::tanh: return launch_map("unary_tanh", x, y, n, Tanh{}, stream);
    case UnaryOp::relu: return launch_map("relu_forward", x, y, n, Relu{}, stream);
  }
}

void pow_scalar(const float* x, float exponent, float* y, std::size_t n, cudaStream_t stream) {
  if (exponent == 2.0f) return launch_map("pow_scalar", x, y, n, Square{}, stream);
  launch_map("pow_scalar", x, y, n, Pow{exponent}, stream);
}

void affine(const float* x, float scale, float shift, float* y, std::size_t n, cudaStream_t stream) {
  launch_map("affine", x, y, n, Affine{scale, shift}, stream);
}

void binary(BinaryOp op, const float* a, const float* b, float* out, std::size_t n, cudaStream_t stream) {
  constexpr WriteMode w = WriteMode::overwrite;
  switch (op) {
    case BinaryOp::add: return launch_zip("binary_add", a, b, out, n, w, Add{}, stream);
    case BinaryOp::sub: return launch_zip("binary_sub", a, b, out, n, w, Sub{}, stream);
    case BinaryOp::mul: return launch_zip("binary_mul", a, b, out, n, w, Mul{}, stream);
    case BinaryOp::div: return launch_zip("binary_div", a, b, out, n, w, Div{}, stream);
  }
}

void binary_broadcast(BinaryOp op, const float* a, const float* b, float* out, const BroadcastLayout& layout,
                      cudaStream_t stream) {
  switch (op) {
    case BinaryOp::add: return launch_broadcast(a, b, out, layout, Add{}, stream);
    case BinaryOp::sub: return launch_broadcast(a, b, out, layout, Sub{}, stream);
    case BinaryOp::mul: return launch_broadcast(a, b, out, layout, Mul{}, stream);
    case BinaryOp::div: return launch_broadcast(a, b, out, layout, Div{}, stream);
  }
}

void activation_grad(ActivationGrad op, const float* dy, const float* y, float* dx, std::size_t n,
                     WriteMode mode, cudaStream_t stream) {
  switch (op) {
    case ActivationGrad::relu: return launch_zip("relu_backward", dy, y, dx, n, mode, ReluGrad{}, stream);
    case ActivationGrad::sigmoid: return launch_zip("sigmoid_backward", dy, y, dx, n, mode, SigmoidGrad{}, stream);
    case ActivationGrad::tanh: return launch_zip("tanh_backward", dy, y, dx, n, mode, TanhGrad{}, stream);
  }
}

void expand(const float* x, float* out, const BroadcastLayout& layout, float scale, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(layout.numel());
  if (n == 0) return;
  expand_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, out, layout, n, scale);
  check_launch("expand", stream);
}

template <class T>
void fill(T* y, T value, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kBlock, 0, stream>>>(y, value, n);
  check_launch("fill", stream);
}

template <class From, class To>
void cast(const From* x, To* y, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n);
  check_launch("cast", stream);
}

void normalize_u8(const std::uint8_t* x, float* y, std::size_t n, float mean, float std, cudaStream_t stream) {
  if (n == 0) return;
  // The same two constants as the CPU twin, so both compute one multiply-add per pixel.
  const float scale = 1.0f / (255.0f * std);
  const float shift = -mean / std;
  normalize_u8_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n, scale, shift);
  check_launch("normalize_u8", stream);
}

#define EMBER_INSTANTIATE_FILL(T) template void fill<T>(T*, T, std::size_t, cudaStream_t);
EMBER_INSTANTIATE_FILL(float)
EMBER_INSTANTIATE_FILL(double)
EMBER_INSTANTIATE_FILL(std::int32_t)
EMBER_INSTANTIATE_FILL(std::int64_t)
EMBER_INSTANTIATE_FILL(std::uint8_t)
#undef EMBER_INSTANTIATE_FILL

#define EMBER_INSTANTIATE_CAST_FROM(From)                                                        \
  template void cast<From, float>(const From*, float*, std::size_t, cudaStream_t);               \
  template void cast<From, double>(const From*, double*, std::size_t, cudaStream_t);             \
  template void cast<From, std::int32_t>(const From*, std::int32_t*, std::size_t, cudaStream_t); \
  template void cast<From, std::int64_t>(const From*, std::int64_t*, std::size_t, cudaStream_t); \
  template void cast<From, std::uint8_t>(const From*, std::uint8_t*, std::size_t, cudaStream_t);
EMBER_INSTANTIATE_CAST_FROM(float)
EMBER_INSTANTIATE_CAST_FROM(double)
EMBER_INSTANTIATE_CAST_FROM(std::int32_t)
EMBER_INSTANTIATE_CAST_FROM(std::int64_t)
EMBER_INSTANTIATE_CAST_FROM(std::uint8_t)
#undef EMBER_INSTANTIATE_CAST_FROM

}  // namespace ember::kernels::cuda
