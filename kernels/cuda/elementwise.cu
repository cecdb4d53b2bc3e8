// CUDA elementwise kernels (f32; unary and binary maps and activation gradients also in bf16 and
// f16, computing in f32; casts and fill for every dtype). Kernels first, then launchers.
// The formulas are kernels/elementwise_math.h's; each kernel is compiled once per op.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise.h"

namespace ember::kernels::cuda {
namespace {

// T is float, bfloat16 or float16; C = compute_t<T> (f32 for the 16-bit types).
template <UnaryOp Op, class T>
__global__ void unary_kernel(const T* x, T* y, std::size_t n, OpArgs<compute_t<T>> args) {
  using C = compute_t<T>;
  for (std::size_t i = global_thread(); i < n; i += grid_stride())
    y[i] = T(unary_formula<Op>(static_cast<C>(x[i]), args));
}

template <BinaryOp Op, class T>
__global__ void binary_kernel(const T* a, const T* b, T* out, std::size_t n) {
  using C = compute_t<T>;
  for (std::size_t i = global_thread(); i < n; i += grid_stride())
    out[i] = T(binary_formula<Op>(static_cast<C>(a[i]), static_cast<C>(b[i])));
}

template <ActivationGrad Op, class T>
__global__ void activation_grad_kernel(const T* dy, const T* saved, T* dx, std::size_t n, WriteMode mode,
                                       OpArgs<compute_t<T>> args) {
  using C = compute_t<T>;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    const C g = activation_grad_formula<Op>(static_cast<C>(dy[i]), static_cast<C>(saved[i]), args);
    dx[i] = T(mode == WriteMode::overwrite ? g : static_cast<C>(dx[i]) + g);
  }
}

template <BinaryOp Op, class T>
__global__ void broadcast_kernel(const T* a, const T* b, T* out, BroadcastLayout layout, std::size_t n) {
  using C = compute_t<T>;
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) {
    long long rest = static_cast<long long>(i), off_a = 0, off_b = 0;
    for (int d = layout.ndim - 1; d >= 0; --d) {
      const long long index = rest % layout.out_shape[d];
      rest /= layout.out_shape[d];
      off_a += index * layout.a_stride[d];
      off_b += index * layout.b_stride[d];
    }
    out[i] = T(binary_formula<Op>(static_cast<C>(a[off_a]), static_cast<C>(b[off_b])));
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

__global__ void select_kernel(const std::uint8_t* cond, const float* a, const float* b, float* out, std::size_t n) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) out[i] = select_formula(cond[i], a[i], b[i]);
}

template <class T>
__global__ void fill_kernel(T* y, T value, std::size_t n) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) y[i] = value;
}

template <class From, class To>
__global__ void cast_kernel(const From* x, To* y, std::size_t n) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) y[i] = cast_formula<From, To>(x[i]);
}

// Block row blockIdx.y casts entry blockIdx.y of the list.
template <class To>
__global__ void cast_list_kernel(CastList list) {
  const int entry = static_cast<int>(blockIdx.y);
  const float* x = list.from[entry];
  To* y = static_cast<To*>(list.to[entry]);
  for (std::size_t i = global_thread(); i < list.n[entry]; i += grid_stride()) y[i] = cast_formula<float, To>(x[i]);
}

__global__ void normalize_u8_kernel(const std::uint8_t* x, float* y, std::size_t n, PixelScaling s) {
  for (std::size_t i = global_thread(); i < n; i += grid_stride()) y[i] = scale_pixel(x[i], s);
}

}  // namespace

template <class T>
void unary(UnaryOp op, const T* x, T* y, std::size_t n, OpArgs<compute_t<T>> args, cudaStream_t stream) {
  with_unary_op(op, [&](auto op_c) { launch_n<unary_kernel<decltype(op_c)::value, T>>(n, stream, x, y, n, args); });
}

template <class T>
void binary(BinaryOp op, const T* a, const T* b, T* out, std::size_t n, cudaStream_t stream) {
  with_binary_op(op, [&](auto op_c) { launch_n<binary_kernel<decltype(op_c)::value, T>>(n, stream, a, b, out, n); });
}

template <class T>
void binary_broadcast(BinaryOp op, const T* a, const T* b, T* out, const BroadcastLayout& layout, cudaStream_t stream) {
  const auto n = static_cast<std::size_t>(layout.numel());
  with_binary_op(
      op, [&](auto op_c) { launch_n<broadcast_kernel<decltype(op_c)::value, T>>(n, stream, a, b, out, layout, n); });
}

template <class T>
void activation_grad(ActivationGrad op, const T* dy, const T* saved, T* dx, std::size_t n, WriteMode mode,
                     OpArgs<compute_t<T>> args, cudaStream_t stream) {
  with_activation_grad(op, [&](auto op_c) {
    launch_n<activation_grad_kernel<decltype(op_c)::value, T>>(n, stream, dy, saved, dx, n, mode, args);
  });
}

void expand(const float* x, float* out, const BroadcastLayout& layout, float scale, cudaStream_t stream) {
  const auto n = static_cast<std::size_t>(layout.numel());
  launch_n<expand_kernel>(n, stream, x, out, layout, n, scale);
}

void select(const std::uint8_t* cond, const float* a, const float* b, float* out, std::size_t n, cudaStream_t stream) {
  launch_n<select_kernel>(n, stream, cond, a, b, out, n);
}

template <class T>
void fill(T* y, T value, std::size_t n, cudaStream_t stream) {
  launch_n<fill_kernel<T>>(n, stream, y, value, n);
}

void cast(DType from, const void* x, DType to, void* y, std::size_t n, cudaStream_t stream) {
  visit_dtype(from, [&](auto from_zero) {
    visit_dtype(to, [&](auto to_zero) {
      using From = decltype(from_zero);
      using To = decltype(to_zero);
      launch_n<cast_kernel<From, To>>(n, stream, static_cast<const From*>(x), static_cast<To*>(y), n);
    });
  });
}

void cast_list(const CastList& list, DType to, cudaStream_t stream) {
  std::size_t longest = 0;
  for (int i = 0; i < list.count; ++i) longest = std::max(longest, list.n[i]);
  if (longest == 0) return;
  visit_dtype(to, [&](auto to_zero) {
    using To = decltype(to_zero);
    // The entries' buffers are reached through the list, not passed as arguments (Note [launching kernels]).
    const auto reached = [&] {
      std::vector<Reached> ranges;
      for (int i = 0; i < list.count; ++i) {
        if (list.n[i] == 0) continue;  // (an empty entry may hold no pointer)
        ranges.push_back({list.from[i], list.n[i] * sizeof(float), false});
        ranges.push_back({list.to[i], list.n[i] * sizeof(To), true});
      }
      return ranges;
    };
    launch_reaching<cast_list_kernel<To>>({dim3(grid_for(longest), static_cast<unsigned>(list.count))}, reached, stream,
                                          list);
  });
}

void normalize_u8(const std::uint8_t* x, float* y, std::size_t n, float mean, float std, cudaStream_t stream) {
  launch_n<normalize_u8_kernel>(n, stream, x, y, n, pixel_scaling(mean, std));
}

#define EMBER_INSTANTIATE_MAPS(T)                                                                  \
  template void unary<T>(UnaryOp, const T*, T*, std::size_t, OpArgs<compute_t<T>>, cudaStream_t);  \
  template void activation_grad<T>(ActivationGrad, const T*, const T*, T*, std::size_t, WriteMode, \
                                   OpArgs<compute_t<T>>, cudaStream_t);                            \
  template void binary<T>(BinaryOp, const T*, const T*, T*, std::size_t, cudaStream_t);            \
  template void binary_broadcast<T>(BinaryOp, const T*, const T*, T*, const BroadcastLayout&, cudaStream_t);
EMBER_INSTANTIATE_MAPS(float)
EMBER_INSTANTIATE_MAPS(bfloat16)
EMBER_INSTANTIATE_MAPS(float16)
#undef EMBER_INSTANTIATE_MAPS

#define EMBER_INSTANTIATE_FILL(name, T, ...) template void fill<T>(T*, T, std::size_t, cudaStream_t);
EMBER_FORALL_DTYPES(EMBER_INSTANTIATE_FILL)  // Note [the dtype list]
#undef EMBER_INSTANTIATE_FILL

}  // namespace ember::kernels::cuda
