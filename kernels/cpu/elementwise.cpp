// CPU twins of the elementwise kernels: the reference for the CUDA ones, and the CPU backend.
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/elementwise.h"

namespace ember::kernels::cpu {
namespace {

template <class T>
T apply_unary(UnaryOp op, T x) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::relu: return x > T(0) ? x : T(0);
  }
  return x;
}

template <class T>
T apply_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
  }
  return a;
}

template <class T>
T apply_activation_grad(ActivationGrad op, T dy, T y) {
  switch (op) {
    case ActivationGrad::relu: return y > T(0) ? dy : T(0);
    case ActivationGrad::sigmoid: return dy * y * (T(1) - y);
    case ActivationGrad::tanh: return dy * (T(1) - y * y);
  }
  return dy;
}

// The switch sits outside the loop so that each loop body is a simple map the compiler vectorizes.
template <class T, class F>
void map(const T* x, T* y, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

}  // namespace

template <class T>
void unary(UnaryOp op, const T* x, T* y, std::size_t n) {
  switch (op) {
    case UnaryOp::neg: return map(x, y, n, [](T v) { return -v; });
    case UnaryOp::relu: return map(x, y, n, [](T v) { return v > T(0) ? v : T(0); });
    default: return map(x, y, n, [op](T v) { return apply_unary(op, v); });
  }
}

template <class T>
void pow_scalar(const T* x, T exponent, T* y, std::size_t n) {
  if (exponent == T(2)) return map(x, y, n, [](T v) { return v * v; });
  map(x, y, n, [exponent](T v) { return std::pow(v, exponent); });
}

template <class T>
void affine(const T* x, T scale, T shift, T* y, std::size_t n) {
  map(x, y, n, [scale, shift](T v) { return v * scale + shift; });
}

template <class T>
void binary(BinaryOp op, const T* a, const T* b, T* out, std::size_t n) {
  switch (op) {
    case BinaryOp::add: for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i]; return;
    case BinaryOp::sub: for (std::size_t i = 0; i < n; ++i) out[i] = a[i] - b[i]; return;
    case BinaryOp::mul: for (std::size_t i = 0; i < n; ++i) out[i] = a[i] * b[i]; return;
    case BinaryOp::div: for (std::size_t i = 0; i < n; ++i) out[i] = a[i] / b[i]; return;
  }
}

template <class T>
void binary_broadcast(BinaryOp op, const T* a, const T* b, T* out, const BroadcastLayout& layout) {
  const int nd = layout.ndim;
  if (nd == 0) {
    out[0] = apply_binary(op, a[0], b[0]);
    return;
  }
  const long long total = layout.numel();
  if (total == 0) return;
  // Walk the output in order with an odometer over all dims but the last; the last dim is an
  // inner loop with fixed strides.
  const long long inner = layout.out_shape[nd - 1];
  const long long sa = layout.a_stride[nd - 1], sb = layout.b_stride[nd - 1];
  long long index[kMaxDims] = {};
  long long off_a = 0, off_b = 0;
  for (long long base = 0; base < total; base += inner) {
    for (long long i = 0; i < inner; ++i)
      out[base + i] = apply_binary(op, a[off_a + i * sa], b[off_b + i * sb]);
    for (int d = nd - 2; d >= 0; --d) {
      off_a += layout.a_stride[d];
      off_b += layout.b_stride[d];
      if (++index[d] < layout.out_shape[d]) break;
      off_a -= layout.a_stride[d] * layout.out_shape[d];
      off_b -= layout.b_stride[d] * layout.out_shape[d];
      index[d] = 0;
    }
  }
}

template <class T>
void expand(const T* x, T* out, const BroadcastLayout& layout, T scale) {
  // The same odometer walk as binary_broadcast, over one operand.
  const BroadcastLayout& l = layout;
  const long long n = l.numel();
  if (n == 0) return;
  if (l.ndim == 0) {
    out[0] = x[0] * scale;
    return;
  }
  const int nd = l.ndim;
  const long long inner = l.out_shape[nd - 1], sa = l.a_stride[nd - 1];
  long long index[kMaxDims] = {};
  long long off = 0;
  for (long long base = 0; base < n; base += inner) {
    for (long long i = 0; i < inner; ++i) out[base + i] = x[off + i * sa] * scale;
    for (int d = nd - 2; d >= 0; --d) {
      off += l.a_stride[d];
      if (++index[d] < l.out_shape[d]) break;
      off -= l.a_stride[d] * l.out_shape[d];
      index[d] = 0;
    }
  }
}

namespace {
// One loop per (op, mode), the op resolved at compile time, so each loop vectorizes.
template <ActivationGrad Op, class T>
void activation_grad_loop(const T* __restrict dy, const T* __restrict y, T* __restrict dx, std::size_t n,
                          WriteMode mode) {
  if (mode == WriteMode::overwrite) {
    for (std::size_t i = 0; i < n; ++i) dx[i] = apply_activation_grad(Op, dy[i], y[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) dx[i] += apply_activation_grad(Op, dy[i], y[i]);
  }
}
}  // namespace

template <class T>
void activation_grad(ActivationGrad op, const T* dy, const T* y, T* dx, std::size_t n, WriteMode mode) {
  switch (op) {
    case ActivationGrad::relu: return activation_grad_loop<ActivationGrad::relu>(dy, y, dx, n, mode);
    case ActivationGrad::sigmoid: return activation_grad_loop<ActivationGrad::sigmoid>(dy, y, dx, n, mode);
    case ActivationGrad::tanh: return activation_grad_loop<ActivationGrad::tanh>(dy, y, dx, n, mode);
  }
}

template <class T>
void fill(T* y, T value, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = value;
}

template <class From, class To>
void cast(const From* x, To* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<To>(x[i]);
}

void normalize_u8(const std::uint8_t* __restrict x, float* __restrict y, std::size_t n, float mean, float std) {
  // (x/255 − mean)/std as one multiply-add; the CUDA twin uses the same two constants.
  const float scale = 1.0f / (255.0f * std);
  const float shift = -mean / std;
  for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]) * scale + shift;
}

#define EMBER_INSTANTIATE_FLOAT(T)                                                              \
  template void unary<T>(UnaryOp, const T*, T*, std::size_t);                                   \
  template void pow_scalar<T>(const T*, T, T*, std::size_t);                                    \
  template void affine<T>(const T*, T, T, T*, std::size_t);                                     \
  template void binary<T>(BinaryOp, const T*, const T*, T*, std::size_t);                       \
  template void binary_broadcast<T>(BinaryOp, const T*, const T*, T*, const BroadcastLayout&);  \
  template void expand<T>(const T*, T*, const BroadcastLayout&, T);                             \
  template void activation_grad<T>(ActivationGrad, const T*, const T*, T*, std::size_t, WriteMode);
EMBER_INSTANTIATE_FLOAT(float)
EMBER_INSTANTIATE_FLOAT(double)
#undef EMBER_INSTANTIATE_FLOAT

#define EMBER_INSTANTIATE_FILL(T) template void fill<T>(T*, T, std::size_t);
EMBER_INSTANTIATE_FILL(float)
EMBER_INSTANTIATE_FILL(double)
EMBER_INSTANTIATE_FILL(std::int32_t)
EMBER_INSTANTIATE_FILL(std::int64_t)
EMBER_INSTANTIATE_FILL(std::uint8_t)
#undef EMBER_INSTANTIATE_FILL

#define EMBER_INSTANTIATE_CAST_FROM(From)                                      \
  template void cast<From, float>(const From*, float*, std::size_t);           \
  template void cast<From, double>(const From*, double*, std::size_t);         \
  template void cast<From, std::int32_t>(const From*, std::int32_t*, std::size_t); \
  template void cast<From, std::int64_t>(const From*, std::int64_t*, std::size_t); \
  template void cast<From, std::uint8_t>(const From*, std::uint8_t*, std::size_t);
EMBER_INSTANTIATE_CAST_FROM(float)
EMBER_INSTANTIATE_CAST_FROM(double)
EMBER_INSTANTIATE_CAST_FROM(std::int32_t)
EMBER_INSTANTIATE_CAST_FROM(std::int64_t)
EMBER_INSTANTIATE_CAST_FROM(std::uint8_t)
#undef EMBER_INSTANTIATE_CAST_FROM

}  // namespace ember::kernels::cpu
